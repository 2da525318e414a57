package amqp

import (
	"encoding/binary"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// The methods of every message, basic.publish and basic.ack, are decoded
// by the reader into values its channel keeps for them, not new ones
// (wire.ReadMethod allocates the method and its reader), and a publish's
// exchange and routing key, mostly those of the channel's publish before,
// keep that one's strings. Only a payload they decode whole is taken so;
// anything else, malformed ones included, goes to wire.ReadMethod, which
// says what is wrong with it.

// readHot returns the method of payload p decoded into the channel's own
// value, or nil for wire.ReadMethod to decode. Reader goroutine only.
func (ch *channel) readHot(p []byte) wire.Method {
	if len(p) < 4 {
		return nil
	}
	switch {
	case isBasicPublish(p):
		if ch.pub != nil {
			return nil // a publish in progress holds pubIn: refused as before
		}
		return ch.readPublish(p[4:])
	case isBasicAck(p):
		b := p[4:]
		if len(b) != 8+1 {
			return nil
		}
		ch.ackIn = wire.BasicAck{DeliveryTag: binary.BigEndian.Uint64(b), Multiple: b[8]&1 != 0}
		return &ch.ackIn
	}
	return nil
}

// readPublish decodes basic.publish's arguments (reserved short,
// exchange, routing key, bits) into ch.pubIn; nil if b is not exactly
// that.
func (ch *channel) readPublish(b []byte) wire.Method {
	if len(b) < 2+1 {
		return nil
	}
	reserved := binary.BigEndian.Uint16(b)
	b = b[2:]
	exch, b, ok := shortStr(b, ch.pubIn.Exchange)
	if !ok {
		return nil
	}
	key, b, ok := shortStr(b, ch.pubIn.RoutingKey)
	if !ok || len(b) != 1 {
		return nil
	}
	ch.pubIn = wire.BasicPublish{Reserved1: reserved, Exchange: exch, RoutingKey: key, Mandatory: b[0]&1 != 0, Immediate: b[0]&2 != 0}
	return &ch.pubIn
}

// shortStr reads a short string from b: last if it has the same bytes
// (no allocation), else a new string; and the rest of b.
func shortStr(b []byte, last string) (string, []byte, bool) {
	if len(b) < 1 {
		return "", nil, false
	}
	n := 1 + int(b[0])
	if len(b) < n {
		return "", nil, false
	}
	if string(b[1:n]) == last {
		return last, b[n:], true
	}
	return string(b[1:n]), b[n:], true
}

// isBasicAck reports whether a method frame's payload is basic.ack.
func isBasicAck(p []byte) bool {
	class, method := (*wire.BasicAck).ID(nil)
	return len(p) >= 4 && binary.BigEndian.Uint16(p) == class && binary.BigEndian.Uint16(p[2:]) == method
}
