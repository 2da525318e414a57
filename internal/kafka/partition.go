package kafka

// Kafka offsets over ConsumeQueue entries (see the package documentation):
// one entry per stored batch; a batch's Kafka offsets are its base offset
// (in the stored batch) to base+lastOffsetDelta. partitions keeps, per
// topic queue, the next offset to assign and small caches; everything
// else is read from the store.

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
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

// maxHints bounds a partition's offset-to-entry hints.
const maxHints = 256

// partition is one topic queue seen as a Kafka partition.
type partition struct {
	key queueKey

	// appendMu serializes appends: the base offset is assigned and the
	// record appended under it, so base offsets grow with entry order.
	appendMu  sync.Mutex
	loaded    bool                     // next and producers are known (guarded by appendMu)
	next      int64                    // next Kafka offset to assign (guarded by appendMu)
	producers map[int64]*producerState // idempotent producers' windows (guarded by appendMu)
	sweptMs   int64                    // when producers were last swept for expiry (guarded by appendMu)

	mu       sync.Mutex      // guards the caches below
	hwmEntry int64           // entry count the cached high watermark is for (-1: none)
	hwm      int64           // Kafka offset after the last visible batch
	lsEntry  int64           // min entry the cached log start is for (-1: none)
	ls       int64           // base offset of the first stored batch
	hints    map[int64]int64 // Kafka offset -> entry index of the batch holding it (fetch ends)

	foreign foreignScan // where the Kafka batches are among other protocols' entries (foreign.go)
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
		p = &partition{key: k, hwmEntry: -1, lsEntry: -1, hints: map[int64]int64{}, producers: map[int64]*producerState{}}
		ps.m[k] = p
	}
	return p
}

// batchAt is the Kafka view of entry idx: ok false when the entry is not
// a Kafka batch (a RocketMQ message: not served to Kafka clients yet).
type batchAt struct {
	base, end int64 // Kafka offsets [base, end)
	storeMs   int64
	bodyLen   int // bytes of the batch at the record's end
	pid       int64
	epoch     int16
	seq       int32
	ok        bool
}

// readEntry reads entry idx of the queue.
func (ps *partitions) readEntry(k queueKey, idx int64) (batchAt, error) {
	r, err := ps.st.GetMessage(k.topic, k.queueID, idx, 1, 1, nil)
	if err != nil {
		return batchAt{}, err
	}
	defer r.Release()
	if r.Status != store.Found || len(r.Records) == 0 {
		return batchAt{}, fmt.Errorf("kafka: entry %d of %s/%d: %v", idx, k.topic, k.queueID, r.Status)
	}
	return kafkaView(r.Records[0])
}

// kafkaView returns what a stored record is to Kafka.
func kafkaView(rec []byte) (batchAt, error) {
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
	return batchAt{base: h.baseOffset, end: h.baseOffset + int64(h.lastOffsetDelta) + 1, storeMs: e.StoreTimestamp(), bodyLen: len(e.Body()),
		pid: h.producerID, epoch: h.epoch, seq: h.baseSequence, ok: true}, nil
}

// lastEnd is the Kafka offset after the last batch among the entries
// below entries, scanning back; with no batch at all it is the entry
// count itself (a queue RocketMQ producers wrote continues from there).
func (ps *partitions) lastEnd(k queueKey, entries int64) (int64, error) {
	return ps.scannedEnd(k, entries) // foreign.go: incremental, instead of scanning back each time
}

// nextOffset is the base offset the next batch gets. appendMu is held.
func (ps *partitions) nextOffset(p *partition) (int64, error) {
	if !p.loaded {
		n, err := ps.lastEnd(p.key, ps.st.MaxOffset(p.key.topic, p.key.queueID))
		if err == nil {
			err = ps.loadSequences(p)
		}
		if err != nil {
			return 0, err
		}
		p.next, p.loaded = n, true
	}
	return p.next, nil
}

// highWatermark is the Kafka offset after the last visible batch.
func (ps *partitions) highWatermark(p *partition) (int64, error) {
	entries := ps.st.MaxOffset(p.key.topic, p.key.queueID)
	p.mu.Lock()
	if p.hwmEntry == entries {
		h := p.hwm
		p.mu.Unlock()
		return h, nil
	}
	p.mu.Unlock()
	h, err := ps.lastEnd(p.key, entries)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	if entries > p.hwmEntry {
		p.hwmEntry, p.hwm = entries, h
	}
	p.mu.Unlock()
	return h, nil
}

// logStart is the first Kafka offset still stored (the high watermark
// when nothing is).
func (ps *partitions) logStart(p *partition, hwm int64) (int64, error) {
	lo, hi := ps.st.MinOffset(p.key.topic, p.key.queueID), ps.st.MaxOffset(p.key.topic, p.key.queueID)
	p.mu.Lock()
	if p.lsEntry == lo && lo < hi {
		v := p.ls
		p.mu.Unlock()
		return v, nil
	}
	p.mu.Unlock()
	if v, ok, err := ps.foreignStart(p); ok || err != nil {
		return v, err // other protocols' entries come first (foreign.go)
	}
	for i := lo; i < hi; i++ {
		b, err := ps.readEntry(p.key, i)
		if err != nil {
			return 0, err
		}
		if b.ok {
			p.mu.Lock()
			p.lsEntry, p.ls = lo, b.base
			p.mu.Unlock()
			return b.base, nil
		}
	}
	return hwm, nil
}

// entryOf returns the index of the entry whose batch holds Kafka offset
// off (or the first batch after it), which must be below the high
// watermark: a hint from an earlier fetch, else a binary search over the
// entries reading each probe's batch header.
func (ps *partitions) entryOf(p *partition, off int64) (int64, error) {
	p.mu.Lock()
	idx, ok := p.hints[off]
	p.mu.Unlock()
	if ok {
		return idx, nil
	}
	lo, hi := ps.st.MinOffset(p.key.topic, p.key.queueID), ps.st.MaxOffset(p.key.topic, p.key.queueID)
	e, from, ok, err := ps.foreignEntry(p, off) // foreign.go
	if ok || err != nil {
		return e, err
	}
	lo = max(lo, from)
	var ferr error
	// The first entry whose batch ends after off; non-Kafka entries are
	// judged by the next Kafka batch after them.
	n := sort.Search(int(hi-lo), func(i int) bool {
		if ferr != nil {
			return true
		}
		for j := lo + int64(i); j < hi; j++ {
			b, err := ps.readEntry(p.key, j)
			if err != nil {
				ferr = err
				return true
			}
			if b.ok {
				return b.end > off
			}
		}
		return true
	})
	if ferr != nil {
		return 0, ferr
	}
	return lo + int64(n), nil
}

// searched reports whether off has no hint (its entry came from the
// binary search, which is never stale).
func (p *partition) searched(off int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.hints[off]
	return !ok
}

// dropHints forgets every hint.
func (p *partition) dropHints() {
	p.mu.Lock()
	clear(p.hints)
	p.mu.Unlock()
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

// hint records that Kafka offset off is at entry idx.
func (p *partition) hint(off, idx int64) {
	p.mu.Lock()
	if len(p.hints) >= maxHints {
		clear(p.hints)
	}
	p.hints[off] = idx
	p.mu.Unlock()
}
