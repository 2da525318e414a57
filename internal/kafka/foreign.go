package kafka

// Kafka reads of the entries other protocols wrote (RocketMQ messages,
// AMQP messages) — the package documentation, "Entries of other
// protocols", gives the offsets. Where a partition's first Kafka batch is
// is learned by a forward scan, kept per partition and extended as
// entries are added until a batch is found (then never again: a pure
// Kafka partition finds it at its first entry); the last batch, for the
// high watermark, by a scan back from the end that stops at that first
// batch.

import (
	"math"
	"sync"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/translate"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// foreignScan is a partition's scan.
type foreignScan struct {
	mu sync.Mutex
	st foreignState
}

// foreignState is what the scan learned.
type foreignState struct {
	begun     bool
	scanned   int64 // entries below were examined (while no batch was found)
	first     int64 // entry of the first Kafka batch (-1: none below scanned)
	firstBase int64
}

// scan looks for the first Kafka batch among the entries below hi, from
// where it stopped, and returns what is known.
func (ps *partitions) scan(p *partition, hi int64) (foreignState, error) {
	p.foreign.mu.Lock()
	defer p.foreign.mu.Unlock()
	f := &p.foreign.st
	if !f.begun {
		f.begun, f.first = true, -1
	}
	k := p.key
	pos := max(f.scanned, ps.st.MinOffset(k.topic, k.queueID))
	for pos < hi && f.first < 0 {
		r, err := ps.st.GetMessage(k.topic, k.queueID, pos, 64, 1<<20, nil)
		if err != nil {
			return foreignState{}, err
		}
		if r.Status != store.Found {
			next := r.NextOffset
			r.Release()
			if next <= pos {
				break
			}
			pos = next
			continue
		}
		next := max(r.NextOffset, pos+1)
		for _, rec := range r.Records {
			b, err := kafkaView(rec)
			if err != nil {
				r.Release()
				return foreignState{}, err
			}
			if !b.ok {
				continue
			}
			if qo, ok := translate.QueueOffset(rec, k.topic, k.queueID); ok {
				f.first, f.firstBase, next = qo, b.base, qo+1
				break
			}
		}
		pos = next
		r.Release()
	}
	f.scanned = max(f.scanned, min(pos, hi))
	return *f, nil
}

// prefixEnd is the entry before which entries of other protocols are
// served to Kafka consumers, each at its queue offset: the first Kafka
// batch's entry or base offset, whichever is lower (MaxInt64 with no
// batch).
func (f foreignState) prefixEnd() int64 {
	if f.first < 0 {
		return math.MaxInt64
	}
	return min(f.first, f.firstBase)
}

// scannedEnd is lastEnd: the end of the last batch below entries (read
// back from the end down to the first batch), or entries when there is
// none.
func (ps *partitions) scannedEnd(k queueKey, entries int64) (int64, error) {
	f, err := ps.scan(ps.get(k.topic, k.queueID), entries)
	if err != nil {
		return 0, err
	}
	if f.first < 0 {
		return entries, nil
	}
	lo := max(ps.st.MinOffset(k.topic, k.queueID), f.first)
	for i := entries - 1; i >= lo; i-- {
		b, err := ps.readEntry(k, i)
		if err != nil {
			return 0, err
		}
		if b.ok {
			return b.end, nil
		}
	}
	return entries, nil
}

// foreignStart is logStart's answer when the queue's first entry is one
// served at its queue offset (ok false otherwise).
func (ps *partitions) foreignStart(p *partition) (int64, bool, error) {
	lo, hi := ps.st.MinOffset(p.key.topic, p.key.queueID), ps.st.MaxOffset(p.key.topic, p.key.queueID)
	f, err := ps.scan(p, hi)
	if err != nil || lo >= hi || lo >= f.prefixEnd() {
		return 0, false, err
	}
	return lo, true, nil
}

// foreignEntry is entryOf's answer for an offset served at its queue
// offset (ok false otherwise); searchFrom is where a search for a Kafka
// batch may start (past the prefix).
func (ps *partitions) foreignEntry(p *partition, off int64) (entry, searchFrom int64, ok bool, err error) {
	f, err := ps.scan(p, ps.st.MaxOffset(p.key.topic, p.key.queueID))
	if err != nil {
		return 0, 0, false, err
	}
	if off < f.prefixEnd() {
		return off, 0, true, nil
	}
	return 0, max(f.first, 0), false, nil
}

// appendForeign converts rec, a record of another protocol at the queue's
// entries, into a record at its queue offset when that entry is served
// to Kafka (before the first batch, at or after off), added to the batch
// w has open when it continues it, else to a new one; it reports whether
// it appended and whether the response is full (then nothing was added).
func (s *Server) appendForeign(part *partition, w *translate.KafkaBatchWriter, rec []byte, off int64, limit int, rp *kmsg.FetchResponseTopicPartition) (appended, full bool, err error) {
	k := part.key
	qo, ok := translate.QueueOffset(rec, k.topic, k.queueID)
	if !ok || qo < off {
		return false, false, nil
	}
	f, err := s.parts.scan(part, qo+1)
	if err != nil || qo >= f.prefixEnd() {
		return false, false, err
	}
	r, err := translate.KafkaRecordOf(rec, qo, translate.DefaultLimit)
	if err != nil {
		s.log.Error("kafka: fetch: a record of another protocol does not convert; skipped", "topic", k.topic, "queue_id", k.queueID, "queue_offset", qo, "err", err)
		return false, false, nil
	}
	if w.Open() && w.Next() != qo {
		rp.RecordBatches = w.Close(rp.RecordBatches)
	}
	n, prev := len(rp.RecordBatches), *w
	rp.RecordBatches = w.Append(rp.RecordBatches, &r)
	if n > 0 && len(rp.RecordBatches) > limit {
		rp.RecordBatches, *w = rp.RecordBatches[:n], prev
		return false, true, nil
	}
	part.hint(qo+1, qo+1)
	return true, false, nil
}

// foreignAt is ListOffsets' view of entry idx when it is another
// protocol's entry served at its queue offset: the offset (idx) and the
// record's store time; ok false otherwise.
func (ps *partitions) foreignAt(p *partition, idx int64) (storeMs int64, ok bool, err error) {
	f, err := ps.scan(p, ps.st.MaxOffset(p.key.topic, p.key.queueID))
	if err != nil || idx >= f.prefixEnd() {
		return 0, false, err
	}
	r, err := ps.st.GetMessage(p.key.topic, p.key.queueID, idx, 1, 1, nil)
	if err != nil {
		return 0, false, err
	}
	defer r.Release()
	if r.Status != store.Found || len(r.Records) == 0 {
		return 0, false, nil
	}
	rec := r.Records[0]
	if qo, ok := translate.QueueOffset(rec, p.key.topic, p.key.queueID); !ok || qo != idx {
		return 0, false, nil
	}
	return translate.StoreTimestamp(rec), true, nil
}
