package config

import (
	"strings"
	"time"
)

// AMQPConsumerTimeoutOrNever is the AMQP front door's consumer timeout:
// amqpConsumerTimeoutMillis, negative (never) for 0.
func (b *Broker) AMQPConsumerTimeoutOrNever() time.Duration {
	if b.AMQPConsumerTimeout == 0 {
		return -1
	}
	return b.AMQPConsumerTimeout
}

// AMQPVhostList returns amqpVhosts as a list (empty entries dropped).
func (b *Broker) AMQPVhostList() []string {
	var out []string
	for _, v := range strings.Split(b.AMQPVhosts, ";") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
