package translate

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sync"

	"github.com/keelmq/keel/internal/store/record"
)

// MaxIndexKeyBytes bounds the keys IndexKeys names: a longer key is not
// indexed (the message is still stored and delivered).
const MaxIndexKeyBytes = 1024

// IndexKeys inflates a compressed Kafka batch to at most
// IndexInflateRatio times its stored size, or MinIndexInflateBytes if
// that is more (and never beyond its limit argument): it runs on the
// store's one dispatcher, which a batch compressed far beyond what
// records compress to would hold back for everyone.
const (
	IndexInflateRatio    = 32
	MinIndexInflateBytes = 1 << 20
)

// inflatePool holds IndexKeys' buffers for inflated batches; one grown
// beyond maxPooledInflateBytes is left to the collector.
var inflatePool = sync.Pool{New: func() any { return new([]byte) }}

const maxPooledInflateBytes = 4 << 20

// IndexKeys calls key with each index key of rec, a Kafka batch or an
// AMQP record (the store's hook for the types whose bodies it does not
// read, store.Config.IndexKeys): for a Kafka record its key when the key
// is text (what a RocketMQ reader sees as KEYS), and when it holds spaces
// also each space-separated token (RocketMQ splits KEYS so); for an AMQP
// message its message-id and correlation-id. Empty keys, keys longer than
// MaxIndexKeyBytes and binary Kafka keys are not named; a key repeated in
// a batch is named once. The slice passed to key is valid only during
// the call. A batch that does not decode, or inflates beyond limit bytes
// or the bound above, gives an error and names no key past the point it
// failed; an AMQP message whose first property flags word names neither
// id is read no further (it has no key). Other record types have no keys.
func IndexKeys(rec []byte, limit int, key func([]byte)) error {
	t, err := record.TypeOf(rec)
	if err != nil || !t.Enveloped() {
		return err
	}
	if err := record.CheckEnvelope(rec); err != nil {
		return err
	}
	e := record.Envelope(rec)
	switch t {
	case record.KafkaBatch:
		var seen map[string]bool // only for batches of several records
		if e.Messages() > 1 {
			seen = make(map[string]bool)
		}
		limit = min(limit, max(MinIndexInflateBytes, IndexInflateRatio*len(e.Body())))
		// The inflated records are read here and dropped (the keys named
		// are valid only during key): one pooled buffer serves batch after
		// batch instead of a new one grown for each.
		scratch := inflatePool.Get().(*[]byte)
		defer func() {
			if cap(*scratch) <= maxPooledInflateBytes {
				inflatePool.Put(scratch)
			}
		}()
		return eachKafkaRecord(e.Body(), limit, scratch, func(r *KafkaRecord) error {
			k := r.Key
			if len(k) == 0 || len(k) > MaxIndexKeyBytes || !propText(k) || seen[string(k)] {
				return nil
			}
			if seen != nil {
				seen[string(k)] = true
			}
			key(k)
			if bytes.ContainsAny(k, " \t\r\n\v\f") {
				for _, f := range bytes.Fields(k) {
					key(f)
				}
			}
			return nil
		})
	case record.AMQP:
		raw, err := amqpRecordProps(e.Body())
		if err != nil {
			return err
		}
		if len(raw) >= 2 && binary.BigEndian.Uint16(raw)&(flagMessageID|flagCorrelationID) == 0 {
			return nil // neither id (the first flags word says): no key, nothing else to read
		}
		p, err := ParseAMQPProperties(raw)
		if err != nil {
			return fmt.Errorf("translate: AMQP properties: %w", err)
		}
		if p.Has&flagMessageID != 0 && p.MessageID != "" {
			key([]byte(p.MessageID))
		}
		if p.Has&flagCorrelationID != 0 && p.CorrelationID != "" && p.CorrelationID != p.MessageID {
			key([]byte(p.CorrelationID))
		}
	}
	return nil
}
