package translate

import (
	"bytes"
	"encoding/binary"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
)

// AppendRocketMQFound appends to dst the RocketMQ messages of rec, a
// Kafka batch or an AMQP record, as a look-up answers them (by key, by
// message id, by CommitLog offset): converted as read from the first
// queue of topic that rec is in (topic "": its first destination), and
// only the messages key names — all when key is "", else those with key
// as an index key (IndexKeys: the Kafka key or one of its tokens, the
// AMQP message-id or correlation-id) or as their message id
// (message.ConvertedID). It returns the extended dst and the number of
// messages appended; a record with no destination in topic appends none.
func AppendRocketMQFound(dst, rec []byte, topic, key string, reader Broker, limit int) ([]byte, int, error) {
	if err := record.CheckEnvelope(rec); err != nil {
		return dst, 0, err
	}
	var dt []byte
	qid := int32(-1)
	record.Envelope(rec).EachDest(func(_ int, t []byte, q int32, _, _ int64, _ int) error {
		if qid < 0 && (topic == "" || string(t) == topic) {
			dt, qid = t, q
		}
		return nil
	})
	if qid < 0 {
		return dst, 0, nil
	}
	start := len(dst)
	dst, n, err := AppendRocketMQ(dst, rec, string(dt), qid, reader, limit)
	if err != nil || key == "" {
		return dst, n, err
	}
	// Keep the messages key names, in place.
	conv := dst[start:]
	out, kept := dst[:start], 0
	for len(conv) >= 4 {
		size := int(binary.BigEndian.Uint32(conv))
		m := conv[:size]
		conv = conv[size:]
		if hasKey(message.View(m), key) {
			out = append(out, m...) // never ahead of m: out trails the read position
			kept++
		}
	}
	return out, kept, nil
}

// hasKey reports whether a converted message has key as its message id,
// its KEYS (whole or a token) or its CORRELATION_ID.
func hasKey(v message.View, key string) bool {
	keys := v.Keys()
	if string(v.UniqKey()) == key || string(keys) == key {
		return true
	}
	for _, k := range bytes.Fields(keys) {
		if string(k) == key {
			return true
		}
	}
	c, ok := message.Property(v.Properties(), PropCorrelationID)
	return ok && string(c) == key
}
