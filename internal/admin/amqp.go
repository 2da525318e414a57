package admin

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/keelmq/keel/internal/amqpinfo"
	"github.com/keelmq/keel/internal/remoting"
)

// AMQPQueue is one AMQP queue as a broker reports it (Keel's LIST_AMQP;
// counters since the broker started).
type AMQPQueue = amqpinfo.Queue

// AMQPExchange is one AMQP exchange.
type AMQPExchange = amqpinfo.Exchange

// AMQPConnection is one open AMQP client connection.
type AMQPConnection = amqpinfo.Connection

// BrokerAMQP is one broker's AMQP front door. Enabled is false when the
// broker serves no AMQP listener.
type BrokerAMQP struct {
	Broker      string           `json:"broker"`
	Addr        string           `json:"addr"`
	Enabled     bool             `json:"enabled"`
	Queues      []AMQPQueue      `json:"queues"`
	Exchanges   []AMQPExchange   `json:"exchanges"`
	Connections []AMQPConnection `json:"connections"`
	Err         string           `json:"error,omitempty"`
	// MissingGroups are the groups its AMQP door saw in the cluster and
	// that have no master registered now.
	MissingGroups []string `json:"missingGroups,omitempty"`
}

// AMQP asks every master for its AMQP queues and exchanges (a group
// without a master: its slave, ReadBrokers). A broker that does not
// answer is reported in its Err field.
func (c *Client) AMQP(ctx context.Context) ([]BrokerAMQP, error) {
	brokers, err := c.ReadBrokers(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]BrokerAMQP, 0, len(brokers))
	for _, b := range brokers {
		ba := BrokerAMQP{}
		resp, err := c.invoke(ctx, b.Addr, remoting.ReqListAMQP, nil, nil)
		if err == nil {
			if err = json.Unmarshal(resp.Body, &ba); err != nil {
				err = fmt.Errorf("admin: decode the AMQP report of %s: %w", b.Name, err)
			}
		}
		ba.Broker, ba.Addr = b.Name, b.Addr
		if err != nil {
			ba.Err = err.Error()
		}
		if ba.Queues == nil {
			ba.Queues = []AMQPQueue{}
		}
		if ba.Exchanges == nil {
			ba.Exchanges = []AMQPExchange{}
		}
		if ba.Connections == nil {
			ba.Connections = []AMQPConnection{}
		}
		out = append(out, ba)
	}
	return appendMissing(out), nil
}

// appendMissing adds, for each group a broker's door saw in the cluster
// that has no master registered now (and so is not among out), an entry
// with the error saying so: a group that is down is shown, not left out.
func appendMissing(out []BrokerAMQP) []BrokerAMQP {
	listed := map[string]bool{}
	for _, b := range out {
		listed[b.Broker] = true
	}
	for _, b := range out {
		for _, g := range b.MissingGroups {
			if listed[g] {
				continue
			}
			listed[g] = true
			out = append(out, BrokerAMQP{Broker: g, Queues: []AMQPQueue{}, Exchanges: []AMQPExchange{}, Connections: []AMQPConnection{},
				Err: fmt.Sprintf("no master of broker group %s is registered with the NameServers (broker %s's AMQP door saw it in the cluster)", g, b.Broker)})
		}
	}
	return out
}
