package amqp

import (
	"encoding/binary"
	"fmt"

	"github.com/keelmq/keel/internal/store/record"
)

// The body of an AMQP record (the envelope's BODY, see package record):
//
//	size  field
//	   1  EXCHANGELEN  E
//	   E  EXCHANGE     the exchange it was published to
//	   1  KEYLEN       K
//	   K  ROUTINGKEY
//	   4  PROPSLEN     P
//	   P  PROPS        the content header's property flags and properties as received
//	   .  BODY         the message body
//
// The properties are kept as the publisher's bytes so that a delivery
// re-sends them byte for byte.
type storedMessage struct {
	exchange   string
	routingKey string
	props      []byte
	body       []byte
	storeTs    int64 // ms: when the store wrote it (read only)
}

func appendMessage(dst []byte, m *storedMessage) []byte {
	dst = append(dst, byte(len(m.exchange)))
	dst = append(dst, m.exchange...)
	dst = append(dst, byte(len(m.routingKey)))
	dst = append(dst, m.routingKey...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(m.props)))
	dst = append(dst, m.props...)
	return append(dst, m.body...)
}

// parseMessage decodes an AMQP record (aliasing it).
func parseMessage(rec []byte) (storedMessage, error) {
	var m storedMessage
	if err := record.CheckEnvelope(rec); err != nil {
		return m, err
	}
	e := record.Envelope(rec)
	if e.Type() != record.AMQP {
		return m, fmt.Errorf("amqp: a %v in an AMQP queue", e.Type())
	}
	m.storeTs = e.StoreTimestamp()
	b := e.Body()
	short := fmt.Errorf("amqp: stored message of %d bytes is truncated", len(b))
	if len(b) < 1 || len(b) < 1+int(b[0])+1 {
		return m, short
	}
	m.exchange, b = string(b[1:1+b[0]]), b[1+b[0]:]
	if len(b) < 1+int(b[0])+4 {
		return m, short
	}
	m.routingKey, b = string(b[1:1+b[0]]), b[1+b[0]:]
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return m, short
	}
	m.props, m.body = b[:n], b[n:]
	return m, nil
}
