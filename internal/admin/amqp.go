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
	return out, nil
}
