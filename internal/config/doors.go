package config

import (
	"fmt"
	"net"
	"strconv"
)

// DefaultListenPort is listenPort's default: the base the other doors'
// default ports are derived from.
const DefaultListenPort = 10911

// IsSet reports whether key (a broker.conf key name) was set by the file
// or a flag rather than left at its default.
func (b *Broker) IsSet(key string) bool {
	f := byKey[key]
	if f == nil {
		return false
	}
	_, ok := b.origin[f.key]
	return ok
}

// derivedDoors are the listeners whose default port follows listenPort.
var derivedDoors = []struct {
	key string
	get func(*Broker) *string
}{
	{"httpListen", func(b *Broker) *string { return &b.HTTPListen }},
	{"amqpListen", func(b *Broker) *string { return &b.AMQPListen }},
	{"kafkaListen", func(b *Broker) *string { return &b.KafkaListen }},
}

// DeriveDoorPorts moves the HTTP, AMQP and Kafka listeners that neither
// broker.conf nor a flag set by listenPort's distance from its default:
// each listens on its default port plus (listenPort - 10911), as RocketMQ
// derives the HA port (listenPort+1). A broker on listenPort 10911 keeps
// 8080, 5672 and 9092; a second member of the host on listenPort 11011
// gets 8180, 5772 and 9192, so members that differ in listenPort do not
// collide. listenPort 0 (a port chosen at run time) leaves them as they
// are. A derived port outside 1..65535 is an error naming the key to set.
func (b *Broker) DeriveDoorPorts() error {
	offset := b.ListenPort - DefaultListenPort
	if b.ListenPort <= 0 || b.ListenPort > 65535 || offset == 0 {
		return nil // 0: chosen at run time; out of range: Validate says so
	}
	for _, d := range derivedDoors {
		addr := d.get(b)
		if b.IsSet(d.key) || *addr == "" {
			continue
		}
		host, port, err := net.SplitHostPort(*addr)
		if err != nil {
			return fmt.Errorf("config: %s %q: %w", d.key, *addr, err)
		}
		n, err := strconv.Atoi(port)
		if err != nil {
			return fmt.Errorf("config: %s %q: port %q", d.key, *addr, port)
		}
		if n += offset; n < 1 || n > 65535 {
			return fmt.Errorf("config: listenPort %d puts the default %s (%s, moved by listenPort-%d) at port %d, outside 1..65535: set %s",
				b.ListenPort, d.key, *addr, DefaultListenPort, n, d.key)
		}
		*addr = net.JoinHostPort(host, strconv.Itoa(n))
	}
	return nil
}
