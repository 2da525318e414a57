package broker

// LIST_AMQP (Keel's request code 10403, no ext fields) answers what the
// AMQP front door beside this broker holds, as JSON:
//
//	{"broker":"broker-a","enabled":true,
//	 "queues":[{"name":"jobs","ready":3,"unacked":1,"consumers":1,...}],
//	 "exchanges":[{"name":"amq.direct","type":"direct","durable":true,...}],
//	 "connections":[{"remote":"127.0.0.1:50412","user":"guest","vhost":"/",...}],
//	 "missingGroups":["broker-c"]}
//
// missingGroups (absent when none) are the other broker groups of the
// cluster that the AMQP door saw registered since it started and that
// have no master registered now (SetAMQPMissing), so that a listing of
// every master can show them as down rather than leave them out.
//
// The broker does not import the AMQP package (front doors never import
// one another): the wiring installs an AMQPInfoFunc returning the two
// lists as JSON-encodable values. Without one, "enabled" is false. It is
// read-only.

import (
	"context"
	"encoding/json"

	"github.com/keelmq/keel/internal/remoting"
)

// AMQPInfoFunc returns the AMQP front door's queues, exchanges and open
// connections, JSON-encodable.
type AMQPInfoFunc func() (queues, exchanges, connections any)

// SetAMQPInfo installs the AMQP front door's snapshot (nil removes it).
func (b *Broker) SetAMQPInfo(fn AMQPInfoFunc) {
	if fn == nil {
		b.amqpInfo.Store(nil)
		return
	}
	b.amqpInfo.Store(&fn)
}

// SetAMQPMissing installs the AMQP door's list of the cluster's groups
// seen and gone (nil removes it).
func (b *Broker) SetAMQPMissing(fn func() []string) {
	if fn == nil {
		b.amqpMissing.Store(nil)
		return
	}
	b.amqpMissing.Store(&fn)
}

type amqpReport struct {
	Broker      string   `json:"broker"`
	Enabled     bool     `json:"enabled"`
	Queues      any      `json:"queues"`
	Exchanges   any      `json:"exchanges"`
	Connections any      `json:"connections"`
	Missing     []string `json:"missingGroups,omitempty"`
}

func (b *Broker) handleListAMQP(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	rep := amqpReport{Broker: b.cfg.BrokerName, Queues: []any{}, Exchanges: []any{}, Connections: []any{}}
	if p := b.amqpInfo.Load(); p != nil {
		rep.Enabled = true
		rep.Queues, rep.Exchanges, rep.Connections = (*p)()
	}
	if p := b.amqpMissing.Load(); p != nil {
		rep.Missing = (*p)()
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return req.NewResponse(remoting.ResSystemError, err.Error()), nil
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}
