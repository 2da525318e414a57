package kafka

// Kafka offsets over ConsumeQueue entries (see the package documentation):
// one entry per logical message, so a Kafka offset is the queue offset.
// A stored batch of n records has the n entries from its base offset,
// all locating its record. partitions keeps, per topic queue, the
// idempotent producers' windows and whether the queue holds batches of
// an earlier release; everything else is read from the store.

import (
	"fmt"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
)

type queueKey struct {
	topic   string
	queueID int32
}

// partitions is the per-queue state of the front door.
type partitions struct {
	st  *store.Store
	lim producerLimits   // idempotent producers per partition (idempotence.go)
	now func() time.Time // the clock producer expiry reads
	mu  sync.Mutex
	m   map[queueKey]*partition
}

// partition is one topic queue seen as a Kafka partition.
type partition struct {
	key queueKey

	// appendMu serializes appends of the partition: a batch's sequence is
	// judged and the batch appended under it.
	appendMu  sync.Mutex
	loaded    bool                     // producers are known (guarded by appendMu)
	producers map[int64]*producerState // idempotent producers' windows (guarded by appendMu)
	sweptMs   int64                    // when producers were last swept for expiry (guarded by appendMu)

	old oldFormat // batches of an earlier release (oldformat.go)

	size sizeCache // stored bytes, for retention.bytes (retention.go; its goroutine only)
}

func newPartitions(st *store.Store, lim producerLimits) *partitions {
	return &partitions{st: st, lim: lim, now: time.Now, m: map[queueKey]*partition{}}
}

func (ps *partitions) get(topic string, qid int32) *partition {
	k := queueKey{topic, qid}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	p := ps.m[k]
	if p == nil {
		p = &partition{key: k, producers: map[int64]*producerState{}}
		ps.m[k] = p
	}
	return p
}

// batchAt is the Kafka view of a stored record: ok false when it is not a
// Kafka batch (a RocketMQ or AMQP message, served converted).
type batchAt struct {
	base, end int64 // Kafka offsets [base, end): the record's entries
	storeMs   int64
	bodyLen   int // bytes of the batch at the record's end
	pid       int64
	epoch     int16
	seq       int32
	old       bool // a batch of an earlier release: one entry for all its records
	control   bool // a transaction marker (txnmarker.go)
	ok        bool
}

// readEntry reads the record at entry idx of the queue.
func (ps *partitions) readEntry(k queueKey, idx int64) (batchAt, error) {
	r, err := ps.st.GetMessage(k.topic, k.queueID, idx, 1, 1, nil)
	if err != nil {
		return batchAt{}, err
	}
	defer r.Release()
	if r.Status != store.Found || len(r.Records) == 0 {
		return batchAt{}, fmt.Errorf("kafka: entry %d of %s/%d: %v", idx, k.topic, k.queueID, r.Status)
	}
	return kafkaView(r.Records[0], k)
}

// kafkaView returns what a stored record of queue k is to Kafka.
func kafkaView(rec []byte, k queueKey) (batchAt, error) {
	t, err := record.TypeOf(rec)
	if err != nil || t != record.KafkaBatch {
		return batchAt{}, err
	}
	e := record.Envelope(rec)
	if err := record.CheckEnvelope(rec); err != nil {
		return batchAt{}, err
	}
	h, err := parseBatchHeader(e.Body())
	if err != nil {
		return batchAt{}, fmt.Errorf("kafka: stored batch: %w", err)
	}
	b := batchAt{storeMs: e.StoreTimestamp(), bodyLen: len(e.Body()),
		pid: h.producerID, epoch: h.epoch, seq: h.baseSequence, control: h.attributes&attrControl != 0, ok: true}
	if e.Flags()&record.FlagEntryPerMessage == 0 {
		b.old = true
		b.base, b.end = h.baseOffset, h.baseOffset+int64(h.lastOffsetDelta)+1
		return b, nil
	}
	// The base offset in the body is the first queue offset the store
	// assigned; the destination says it too (and is what locates it).
	first, ok := translate.QueueOffset(rec, k.topic, k.queueID)
	if !ok {
		return batchAt{}, fmt.Errorf("kafka: a stored batch at %d has no destination %s/%d", e.PhysOffset(), k.topic, k.queueID)
	}
	b.base, b.end = first, first+e.Entries()
	return b, nil
}

// highWatermark is the Kafka offset after the last visible message: the
// queue's visible entry count (visible never passes Confirmed: under
// SYNC_FLUSH nothing unflushed is served).
func (ps *partitions) highWatermark(p *partition) int64 {
	return ps.st.MaxOffset(p.key.topic, p.key.queueID)
}

// logStart is the first Kafka offset still stored: the queue's first
// entry (the high watermark when nothing is).
func (ps *partitions) logStart(p *partition) int64 {
	return min(ps.st.MinOffset(p.key.topic, p.key.queueID), ps.highWatermark(p))
}

// forget drops the state of every partition of topic (a deleted topic).
func (ps *partitions) forget(topic string) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for k := range ps.m {
		if k.topic == topic {
			delete(ps.m, k)
		}
	}
}
