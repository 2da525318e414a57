package broker

import (
	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
)

// convertForeign replaces, in res.Records, the records that are not
// RocketMQ messages (a Kafka batch, an AMQP message in the same queue) by
// the RocketMQ messages they convert to (package translate: one per Kafka
// record, each with the entry's queue offset); a RocketMQ client would
// take their raw bytes for a message and fail the whole pull. RocketMQ
// records stay the store's buffers (zero copy); a pull of RocketMQ
// records only returns at once. The converted bytes are bounded by
// MaxPullBytes beyond the first record: the records after the one that
// passes it are left for the next pull (NextOffset is moved back to its
// entry). A record that does not convert (corrupt, or inflating beyond
// translate.DefaultLimit) is logged and skipped, so its queue moves on.
// It returns the bytes the converted messages hold.
//
// A Kafka batch of several records is not given to an orderly consumer
// (one holding the queue's lock): its messages share the entry's queue
// offset, and an orderly client keeps one message per offset, so it would
// consume the first record and commit past the others. The pull stops
// before the batch, and a pull starting at it is refused with an error
// saying why (the consumer stays there: nothing is skipped unseen).
func (b *Broker) convertForeign(p pullRequest, res *store.GetResult) (int, error) {
	first := -1
	for i, r := range res.Records {
		if t, err := record.TypeOf(r); err != nil || t != record.RocketMQ {
			first = i
			break
		}
	}
	if first < 0 {
		return 0, nil
	}
	_, orderly := b.core.QueueLocks().Holder(p.group, core.LockedQueue{Broker: b.cfg.BrokerName, Topic: p.topic, QueueID: p.queueID})
	recs, held, total := res.Records, 0, 0
	out := recs[:first]
	for i := first; i < len(recs); i++ {
		r := recs[i]
		if t, err := record.TypeOf(r); err == nil && t == record.RocketMQ {
			out = append(out, r)
			total += len(r)
			continue
		}
		if len(out) > 0 && total >= b.cfg.MaxPullBytes {
			res.NextOffset = queueOffsetOf(r, p.topic, p.queueID, res.NextOffset)
			break
		}
		if orderly && recordMessages(r) > 1 {
			qo := queueOffsetOf(r, p.topic, p.queueID, res.NextOffset)
			if len(out) == 0 {
				clear(recs)
				res.Records = recs[:0]
				b.log.Error("pull: a Kafka batch of several records cannot go to an orderly consumer", "group", p.group,
					"topic", p.topic, "queue_id", p.queueID, "queue_offset", qo)
				return 0, protoErrorf(remoting.ResSystemError, "the entry at queue offset %d of %s:%d is a Kafka batch of %d records: "+
					"an orderly consumer keeps one message per queue offset and would skip all but the first; "+
					"read this queue with a concurrent consumer or a Kafka consumer (docs/cross-protocol.md)", qo, p.topic, p.queueID, recordMessages(r))
			}
			res.NextOffset = qo
			break
		}
		conv, n, err := translate.AppendRocketMQ(nil, r, p.topic, p.queueID, b.storeHost, translate.DefaultLimit)
		if err != nil {
			b.log.Error("pull: a record of another protocol does not convert for RocketMQ consumers; skipped",
				"topic", p.topic, "queue_id", p.queueID, "queue_offset", queueOffsetOf(r, p.topic, p.queueID, -1), "err", err)
			continue
		}
		if n > 0 {
			out = append(out, conv)
			held += len(conv)
			total += len(conv)
		}
	}
	clear(recs[len(out):])
	res.Records = out
	return held, nil
}

// recordMessages is the number of logical messages a stored record holds.
func recordMessages(rec []byte) int32 {
	if t, err := record.TypeOf(rec); err == nil && t.Enveloped() && record.CheckEnvelope(rec) == nil {
		return record.Envelope(rec).Messages()
	}
	return 1
}

// queueOffsetOf returns the queue offset of a stored record in queue
// (topic, queueID), or def if it does not say.
func queueOffsetOf(rec []byte, topic string, queueID int32, def int64) int64 {
	if qo, ok := translate.QueueOffset(rec, topic, queueID); ok {
		return qo
	}
	return def
}
