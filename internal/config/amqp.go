package config

import "strings"

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
