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
// re-sends them byte for byte (but for a quorum queue's redelivery, which
// adds the x-delivery-count header).
//
// A transaction's messages (tx.commit, tx.go) are one record, so that a
// crash leaves all of them or none: the envelope's MESSAGES is their
// number n (at least 2; a record of one message has the layout above),
// its destinations are those of message 0, then those of message 1, and
// so on, and the body is
//
//	size  field
//	   4  COUNT        n
//	       n times:
//	   2  DESTS        how many of the envelope's destinations, in order, locate the message (at least 1)
//	   4  LEN          L
//	   L  MESSAGE      the layout above
//
// The ConsumeQueue entry of a queue at offset o is the destination whose
// topic and QUEUEOFFSET are the queue's and o; its message is the one
// those DESTS counts give it.
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

// appendTxBody appends the body of a transaction's record: msgs[i]
// (each in the single-message layout) located by dests[i] destinations.
func appendTxBody(dst []byte, msgs [][]byte, dests []int) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(msgs)))
	for i, m := range msgs {
		dst = binary.BigEndian.AppendUint16(dst, uint16(dests[i]))
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(m)))
		dst = append(dst, m...)
	}
	return dst
}

// parseMessage decodes the message of an AMQP record that entry o of
// topic's queue locates (aliasing rec).
func parseMessage(rec []byte, topic string, o int64) (storedMessage, error) {
	return parseMessageLike(rec, topic, o, nil)
}

// parseMessageLike is parseMessage that takes like's exchange and routing
// key (a message parsed before, nil: none) where the record's are the
// same bytes, instead of new strings: a queue's messages mostly share
// them.
func parseMessageLike(rec []byte, topic string, o int64, like *storedMessage) (storedMessage, error) {
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
	if e.Messages() > 1 {
		var err error
		if b, err = txMessage(e, topic, o); err != nil {
			return m, err
		}
	}
	return parseBodyLike(m, b, like)
}

// txMessage returns the message of a transaction's record that entry o
// of topic's queue locates.
func txMessage(e record.Envelope, topic string, o int64) ([]byte, error) {
	dest := -1
	e.EachDest(func(i int, t []byte, qid int32, qo, _ int64, _ int) error {
		if dest < 0 && qid == queueID && qo == o && string(t) == topic {
			dest = i
		}
		return nil
	})
	if dest < 0 {
		return nil, fmt.Errorf("amqp: the record at %d has no destination %s offset %d", e.PhysOffset(), topic, o)
	}
	b := e.Body()
	bad := fmt.Errorf("amqp: the transaction record at %d is malformed", e.PhysOffset())
	if len(b) < 4 || int64(binary.BigEndian.Uint32(b)) != int64(e.Messages()) {
		return nil, bad
	}
	b = b[4:]
	for range e.Messages() {
		if len(b) < 6 {
			return nil, bad
		}
		nd, n := int(binary.BigEndian.Uint16(b)), binary.BigEndian.Uint32(b[2:])
		b = b[6:]
		if uint64(n) > uint64(len(b)) {
			return nil, bad
		}
		if dest < nd {
			return b[:n], nil
		}
		dest -= nd
		b = b[n:]
	}
	return nil, bad
}

// parseBody decodes the single-message layout b into m.
func parseBody(m storedMessage, b []byte) (storedMessage, error) {
	return parseBodyLike(m, b, nil)
}

// parseBodyLike is parseBody taking like's strings where they are the
// same bytes (see parseMessageLike).
func parseBodyLike(m storedMessage, b []byte, like *storedMessage) (storedMessage, error) {
	size := len(b)
	short := func() error { return fmt.Errorf("amqp: stored message of %d bytes is truncated", size) }
	if len(b) < 1 || len(b) < 1+int(b[0])+1 {
		return m, short()
	}
	m.exchange, b = likeString(b[1:1+b[0]], like, false), b[1+b[0]:]
	if len(b) < 1+int(b[0])+4 {
		return m, short()
	}
	m.routingKey, b = likeString(b[1:1+b[0]], like, true), b[1+b[0]:]
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return m, short()
	}
	m.props, m.body = b[:n], b[n:]
	return m, nil
}

// likeString is b as a string: like's routing key (key) or exchange if
// it has those bytes, else a new one.
func likeString(b []byte, like *storedMessage, key bool) string {
	if like != nil {
		s := like.exchange
		if key {
			s = like.routingKey
		}
		if string(b) == s {
			return s
		}
	}
	return string(b)
}
