package broker

import (
	"encoding/binary"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
)

// convertForeign replaces, in res.Records, the records that are not
// RocketMQ messages (a Kafka batch, an AMQP message in the same queue) by
// the RocketMQ messages they convert to (package translate); a RocketMQ
// client would take their raw bytes for a message and fail the whole
// pull. A Kafka batch of n records has n entries, all locating its
// record: the entries the pull read give the records they designate,
// each with its own queue offset (consecutive entries of one batch are
// converted together, the batch decoded once), so a consumer's offsets
// advance one record at a time, orderly consumers included. RocketMQ
// records stay the store's buffers (zero copy); a pull of RocketMQ
// records only returns at once. The converted bytes are bounded by
// MaxPullBytes beyond the first record: the records after the one that
// passes it are left for the next pull (NextOffset is moved back to its
// entry). A record that does not convert (corrupt, or inflating beyond
// translate.DefaultLimit) is logged and skipped, so its queue moves on.
// It returns the bytes the converted messages hold.
//
// A Kafka batch stored by an earlier release has one entry for all its
// records, which then share its queue offset; such a batch of several
// records is not given to an orderly consumer (one holding the queue's
// lock), which keeps one message per offset and would consume the first
// record and commit past the others: the pull stops before the batch,
// and a pull starting at it is refused with an error saying why (the
// consumer stays there: nothing is skipped unseen).
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
	orderly := -1 // unknown until an old batch asks
	recs, held, total := res.Records, 0, 0
	out := recs[:first]
	for i := first; i < len(recs); i++ {
		r := recs[i]
		if t, err := record.TypeOf(r); err == nil && t == record.RocketMQ {
			out = append(out, r)
			total += len(r)
			continue
		}
		// The entries of this record the pull read: the run of identical
		// records from i; the first entry is the pull's offset when the
		// run starts the pull inside the record, else the record's first.
		qo := queueOffsetOf(r, p.topic, p.queueID, res.NextOffset)
		run := 1
		for i+run < len(recs) && samePlace(recs[i+run], r) {
			run++
		}
		from := qo
		if i == 0 {
			from = max(qo, p.offset)
		}
		if len(out) > 0 && total >= b.cfg.MaxPullBytes {
			res.NextOffset = from
			break
		}
		if oldBatch(r) {
			if orderly < 0 {
				orderly = 0
				if _, ok := b.core.QueueLocks().Holder(p.group, core.LockedQueue{Broker: b.cfg.BrokerName, Topic: p.topic, QueueID: p.queueID}); ok {
					orderly = 1
				}
			}
			if orderly == 1 {
				if len(out) == 0 {
					clear(recs)
					res.Records = recs[:0]
					b.log.Error("pull: a Kafka batch of several records stored by an earlier release cannot go to an orderly consumer", "group", p.group,
						"topic", p.topic, "queue_id", p.queueID, "queue_offset", qo)
					return 0, protoErrorf(remoting.ResSystemError, "the entry at queue offset %d of %s:%d is a Kafka batch of %d records stored by an earlier release (one entry for all): "+
						"an orderly consumer keeps one message per queue offset and would skip all but the first; "+
						"read this queue with a concurrent consumer or a Kafka consumer (docs/cross-protocol.md)", qo, p.topic, p.queueID, record.Envelope(r).Messages())
				}
				res.NextOffset = qo
				break
			}
		}
		conv, n, err := translate.AppendRocketMQEntries(nil, r, p.topic, p.queueID, from, from+int64(run), b.reader(), translate.DefaultLimit)
		i += run - 1
		if err != nil {
			b.log.Error("pull: a record of another protocol does not convert for RocketMQ consumers; skipped",
				"topic", p.topic, "queue_id", p.queueID, "queue_offset", from, "err", err)
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

// oldBatch reports whether rec is a record of several messages with one
// entry for all (a Kafka batch of an earlier release).
func oldBatch(rec []byte) bool {
	if t, err := record.TypeOf(rec); err != nil || !t.Enveloped() || record.CheckEnvelope(rec) != nil {
		return false
	}
	e := record.Envelope(rec)
	return e.Messages() > 1 && e.Flags()&record.FlagEntryPerMessage == 0
}

// samePlace reports whether two stored records are the same record (the
// same CommitLog offset: entries of one Kafka batch).
func samePlace(a, b []byte) bool {
	return len(a) == len(b) && len(a) >= record.HeaderBytes && binary.BigEndian.Uint64(a[28:36]) == binary.BigEndian.Uint64(b[28:36])
}

// queueOffsetOf returns the queue offset of a stored record in queue
// (topic, queueID) — an enveloped record's first entry there — or def if
// it does not say.
func queueOffsetOf(rec []byte, topic string, queueID int32, def int64) int64 {
	if qo, ok := translate.QueueOffset(rec, topic, queueID); ok {
		return qo
	}
	return def
}
