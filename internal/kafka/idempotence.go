package kafka

// The idempotent producer: InitProducerId hands out producer ids, and
// Produce keeps, per (producer id, partition), the sequence ranges of the
// last 5 batches (Kafka's window). Under the partition's append lock:
//
//	unknown producer          stored, whatever its first sequence (Kafka
//	                          does the same: its state may have expired)
//	epoch below the known one INVALID_PRODUCER_EPOCH (47)
//	epoch above               stored; the window starts again (KIP-360)
//	a batch of the window     not stored again: answered with its
//	                          original base offset (after the original is
//	                          confirmed, for acks=-1)
//	any other sequence than   OUT_OF_ORDER_SEQUENCE_NUMBER (45)
//	  last+1
//
// The state lives in memory and is rebuilt after a restart from the
// producer id, epoch and base sequence in the stored batches' headers (the
// last maxSequenceScan records of the partition, read back a batch at a
// time when the partition is first produced to), so a producer retrying across a restart stores
// no duplicate. A producer that has stored nothing in a partition for
// Config.ProducerIDExpiration (default 24 h; Kafka's
// producer.id.expiration.ms) is forgotten there, as Kafka does: its next
// batch is accepted at any sequence. At most Config.MaxProducers are kept
// per partition (default 10000); beyond that the longest idle are
// forgotten first, so memory stays bounded whatever clients do. Producer ids are the start time in ms shifted left by 12
// bits plus a counter: unique across restarts without a file, as long as
// the clock does not go back and fewer than 4096 ids are asked for per ms
// on average. With a transactional id the transaction coordinator
// answers (txn.go).

import (
	"cmp"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	errOutOfOrderSequence   int16 = 45
	errInvalidProducerEpoch int16 = 47

	// sequenceWindow is how many batches per producer and partition are
	// remembered (Kafka's NUM_BATCHES_TO_RETAIN).
	sequenceWindow = 5
	// maxSequenceScan bounds the entries read to rebuild the window after
	// a restart.
	maxSequenceScan = 4096
)

type seqBatch struct {
	first, last int32
	base        int64
	end         int64 // CommitLog end of the record, 0 when read back from the log
}

type producerState struct {
	epoch   int16
	lastMs  int64      // when its last batch was stored (store time after a restart)
	batches []seqBatch // oldest first, at most sequenceWindow
}

// producerLimits bound the producers a partition remembers: one idle for
// longer than expireMs is forgotten (Kafka's producer.id.expiration.ms),
// and beyond max the longest idle go first.
type producerLimits struct {
	expireMs int64
	max      int
}

// Producer ids are unique across the brokers of a cluster without asking
// one another: an id is ms<<20 | node<<12 | n, where ms is the broker's
// start (in Unix milliseconds), node the low 8 bits of its Kafka node id
// (unique in a cluster), and n counts the ids it handed out; the 4,097th id
// of a broker carries into ms, as if it had started a millisecond later.
// A broker that restarts starts from its new start, so its new ids follow
// the old ones unless it handed out more than 4,096 ids per millisecond it
// ran. Two members whose node ids are equal modulo 256 could meet; a
// cluster has fewer members than that.
type pidAllocator struct {
	base int64        // ms<<20 | node<<12
	n    atomic.Int64 // ids handed out
}

func newPIDAllocator(start time.Time, node int32) *pidAllocator {
	return &pidAllocator{base: start.UnixMilli()<<20 | int64(node&0xff)<<12}
}

// next is a producer id no broker of the cluster has handed out.
func (a *pidAllocator) next() int64 {
	n := a.n.Add(1)
	return a.base + n&0xfff + (n>>12)<<20
}

func (s *Server) initProducerID(req *kmsg.InitProducerIDRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
	resp.ProducerID, resp.ProducerEpoch = -1, -1
	if req.TransactionalID != nil {
		return s.initTxnProducer(req) // txn.go
	}
	if req.ProducerID >= 0 && req.ProducerEpoch >= 0 && req.ProducerEpoch < 32767 {
		resp.ProducerID, resp.ProducerEpoch = req.ProducerID, req.ProducerEpoch+1 // KIP-360 bump
		return resp
	}
	resp.ProducerID, resp.ProducerEpoch = s.pids.next(), 0
	return resp
}

// checkSequence judges a batch of an idempotent producer; a duplicate is
// returned with its original offsets. appendMu is held.
func (p *partition) checkSequence(h batchHeader, nowMs int64, lim producerLimits) (*seqBatch, int16) {
	st := p.producers[h.producerID]
	if st != nil && nowMs-st.lastMs > lim.expireMs { // expired: unknown again, as in Kafka
		delete(p.producers, h.producerID)
		st = nil
	}
	if st == nil || h.epoch > st.epoch || len(st.batches) == 0 {
		if st != nil && h.epoch < st.epoch {
			return nil, errInvalidProducerEpoch
		}
		return nil, errNone
	}
	if h.epoch < st.epoch {
		return nil, errInvalidProducerEpoch
	}
	last := h.baseSequence + h.lastOffsetDelta
	for i := range st.batches {
		if b := st.batches[i]; b.first == h.baseSequence && b.last == last {
			return &b, errNone
		}
	}
	if prev := st.batches[len(st.batches)-1].last; h.baseSequence != nextSeq(prev) {
		return nil, errOutOfOrderSequence
	}
	return nil, errNone
}

func nextSeq(s int32) int32 {
	if s == 1<<31-1 {
		return 0
	}
	return s + 1
}

// recordSequence remembers a stored batch at nowMs. appendMu is held.
func (p *partition) recordSequence(pid int64, epoch int16, b seqBatch, nowMs int64, lim producerLimits) {
	st := p.producers[pid]
	if st == nil {
		if len(p.producers) >= lim.max || nowMs-p.sweptMs > lim.expireMs/8 {
			p.expireProducers(nowMs, lim)
		}
		st = &producerState{epoch: epoch}
		p.producers[pid] = st
	}
	st.lastMs = max(st.lastMs, nowMs)
	if epoch > st.epoch {
		st.epoch, st.batches = epoch, st.batches[:0]
	}
	st.batches = append(st.batches, b)
	if len(st.batches) > sequenceWindow {
		st.batches = append(st.batches[:0], st.batches[len(st.batches)-sequenceWindow:]...)
	}
}

// expireProducers forgets the producers idle for longer than the
// expiration and, while more than 7/8 of the bound remain, the longest
// idle (one sort per eviction round, so a stream of new producers costs
// O(log n) each on average). appendMu is held.
func (p *partition) expireProducers(nowMs int64, lim producerLimits) {
	p.sweptMs = nowMs
	for pid, st := range p.producers {
		if nowMs-st.lastMs > lim.expireMs {
			delete(p.producers, pid)
		}
	}
	if len(p.producers) < lim.max {
		return
	}
	type idle struct {
		pid    int64
		lastMs int64
	}
	all := make([]idle, 0, len(p.producers))
	for pid, st := range p.producers {
		all = append(all, idle{pid, st.lastMs})
	}
	slices.SortFunc(all, func(a, b idle) int { return cmp.Compare(a.lastMs, b.lastMs) })
	for _, e := range all[:len(all)-lim.max*7/8] {
		delete(p.producers, e.pid)
	}
}

// errProducersNotLoaded: the producer windows cannot be rebuilt yet (a
// SYNC_MASTER's recovered tail waits for the slaves); an idempotent
// produce is refused with a retriable error meanwhile.
var errProducersNotLoaded = errors.New("kafka: the partition's last records are not replicated yet since the restart; retry")

// loadProducers rebuilds the producers' windows, once, from the last
// batches of the queue: read back from its last entry, a batch at a time
// (a batch's entries all locate it), at most maxSequenceScan records.
// appendMu is held.
//
// On a SYNC_MASTER just restarted, the records written but not replicated
// before the restart are not in the queues until the slaves confirm them
// (Visible below the store's RecoveredEnd): a window rebuilt then would
// miss a batch there and store its retry twice. Until that tail is
// visible it returns errProducersNotLoaded and loads nothing.
func (ps *partitions) loadProducers(p *partition) error {
	if p.loaded {
		return nil
	}
	if ps.st.VisibleOffset() < ps.st.RecoveredEnd() {
		return errProducersNotLoaded
	}
	k := p.key
	lo, hi := ps.st.MinOffset(k.topic, k.queueID), ps.st.MaxOffset(k.topic, k.queueID)
	nowMs := ps.now().UnixMilli()
	var found []batchAt // newest first
	for i, read := hi-1, 0; i >= lo && read < maxSequenceScan; read++ {
		b, err := ps.readEntry(k, i)
		if err != nil {
			return err
		}
		if !b.ok || b.old {
			i--
			continue
		}
		if b.pid >= 0 && !b.control && nowMs-b.storeMs <= ps.lim.expireMs { // a marker has no sequence
			found = append(found, b)
		}
		i = min(b.base, i) - 1 // (a read past a lost entry may return a later batch)
	}
	for _, b := range slices.Backward(found) {
		p.recordSequence(b.pid, b.epoch, seqBatch{first: b.seq, last: b.seq + int32(b.end-b.base-1), base: b.base}, b.storeMs, ps.lim)
	}
	p.loaded = true
	return nil
}
