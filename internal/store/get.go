package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/store/record"
)

// Filter selects messages: first by the tag code in the ConsumeQueue entry,
// then by the record (RocketMQ records only: a record of another type is
// selected by its tag code). A nil Filter matches everything.
type Filter interface {
	MatchTagsCode(code int64) bool
	MatchRecord(v message.View) bool
}

// GetResult is the result of GetMessage. Records are verified stored
// records (without the CRC trailer) in pooled buffers: call Release when
// done with them.
type GetResult struct {
	Status     GetStatus
	NextOffset int64
	MinOffset  int64
	MaxOffset  int64
	Records    [][]byte
	TotalBytes int

	slabs []*[]byte
	slab0 [2]*[]byte    // slabs' first backing array (a 256-record pull of 1 KiB messages takes two)
	slab  []byte        // unused rest of the newest slab
	recs  *[][]byte     // pooled holder of Records' array, if it came from recordsPool
	big   int           // bytes of records too large for a slab (own buffers)
	lent  *atomic.Int64 // the store's count of unreleased results holding buffers
	holds bool          // counted in lent
}

// HeldBytes is the memory the result holds until Release: its whole pooled
// buffers, not just the records in them (a connection's response budget
// counts it for a response lending Records).
func (r *GetResult) HeldBytes() int { return len(r.slabs)*slabBytes + r.big }

// Read buffer pooling.
const (
	slabBytes        = 256 << 10
	entryBatch       = 64 // ConsumeQueue entries fetched per Get
	maxRunReadBytes  = slabBytes
	defaultReadCount = 32
)

var slabPool = sync.Pool{New: func() any { b := make([]byte, slabBytes); return &b }}

// maxPooledRecords bounds the Records arrays kept for reuse (and the one a
// read sizes up front): a pull returns at most MaxPullMessages (1024).
const maxPooledRecords = 1024

// recordsPool holds Records arrays (*[][]byte, empty and cleared) for
// reuse, so that a get of many records neither allocates nor grows one.
var recordsPool sync.Pool

// newRecords gives r an empty Records array with room for n records.
func (r *GetResult) newRecords(n int) {
	if p, ok := recordsPool.Get().(*[][]byte); ok {
		if cap(*p) >= n {
			r.recs, r.Records = p, (*p)[:0]
			return
		}
		recordsPool.Put(p)
	}
	r.Records = make([][]byte, 0, n)
}

// putRecords returns r's Records array to the pool, cleared so that it
// holds no reference to released buffers.
func (r *GetResult) putRecords() {
	rs := r.Records
	if cap(rs) == 0 || cap(rs) > maxPooledRecords {
		return
	}
	clear(rs[:cap(rs)])
	p := r.recs
	if p == nil {
		p = new([][]byte)
	}
	*p = rs[:0]
	r.recs = nil
	recordsPool.Put(p)
}

// Release returns the record buffers to the pool; Records (the slice and
// the records in it) must not be used afterwards.
func (r *GetResult) Release() {
	for _, b := range r.slabs {
		slabPool.Put(b)
	}
	r.putRecords()
	if r.holds {
		r.lent.Add(-1)
		r.holds = false
	}
	clear(r.slab0[:])
	r.slabs, r.slab, r.Records, r.big = nil, nil, nil, 0
}

// alloc returns n bytes from the result's slabs.
func (r *GetResult) alloc(n int) []byte {
	if !r.holds && r.lent != nil {
		r.holds = true
		r.lent.Add(1)
	}
	if n > slabBytes {
		r.big += n
		return make([]byte, n)
	}
	if len(r.slab) < n {
		b := slabPool.Get().(*[]byte)
		if r.slabs == nil {
			r.slabs = r.slab0[:0]
		}
		r.slabs = append(r.slabs, b)
		r.slab = *b
	}
	out := r.slab[:n:n]
	r.slab = r.slab[n:]
	return out
}

func (s *Store) lookupQueue(topic string, queueID int32) *consumequeue.Queue {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	return s.queues[topic][queueID]
}

// GetMessage reads up to maxCount messages (at least one, and more only
// while the total stays within maxBytes) of (topic, queueID) starting at the
// logical offset. Status and NextOffset follow RocketMQ:
//
//	queue missing          NO_MATCHED_LOGIC_QUEUE  next 0
//	queue empty (max 0)    NO_MESSAGE_IN_QUEUE     next 0
//	offset < min           OFFSET_TOO_SMALL        next min
//	offset == max          OFFSET_OVERFLOW_ONE     next offset
//	offset > max           OFFSET_OVERFLOW_BADLY   next max
//	>= 1 message matched   FOUND                   next = after the last scanned entry
//	none matched           NO_MATCHED_MESSAGE      next = after the last scanned entry
//	entries point at deleted CommitLog and none found: MESSAGE_WAS_REMOVING, next advanced
//
// Every record is verified (CRC, structure, topic, queue and offset) before
// it is returned; a record failing verification is never returned. It is
// read once more around the page cache: if that copy verifies it is served
// (the fault was the read's); if not, the record is isolated (isolate.go)
// and skipped, so the batch goes on with the records after it and
// NextOffset passes it. An I/O error ends the batch before it, or, if it
// is the first, is returned.
func (s *Store) GetMessage(topic string, queueID int32, offset int64, maxCount, maxBytes int, f Filter) (*GetResult, error) {
	s.stats.gets.Add(1)
	r := &GetResult{lent: &s.stats.readsLent}
	q := s.lookupQueue(topic, queueID)
	if q == nil {
		r.Status = NoMatchedLogicQueue
		return r, nil
	}
	lo, hi := q.MinOffset(), q.MaxOffset()
	r.MinOffset, r.MaxOffset = lo, hi
	switch {
	case hi == 0:
		r.Status = NoMessageInQueue
	case offset < lo:
		r.Status, r.NextOffset = OffsetTooSmall, lo
	case offset == hi:
		r.Status, r.NextOffset = OffsetOverflowOne, offset
	case offset > hi:
		r.Status, r.NextOffset = OffsetOverflowBadly, hi
	default:
		if maxCount <= 0 {
			maxCount = defaultReadCount
		}
		if err := s.readQueue(q, topic, queueID, offset, hi, maxCount, maxBytes, f, r); err != nil {
			r.Release()
			return nil, err
		}
		s.stats.getMsgs.Add(int64(len(r.Records)))
	}
	return r, nil
}

// queueRead is the state of one GetMessage scan.
type queueRead struct {
	topic    string
	queueID  int32
	maxCount int
	maxBytes int
	f        Filter
	removing bool
	runStart int64  // CommitLog offset of run[0]
	run      []byte // bytes read ahead for contiguous entries
}

func (s *Store) readQueue(q *consumequeue.Queue, topic string, queueID int32, offset, hi int64, maxCount, maxBytes int, f Filter, r *GetResult) error {
	st := &queueRead{topic: topic, queueID: queueID, maxCount: maxCount, maxBytes: maxBytes, f: f}
	// Sized once instead of grown record by record; bounded whatever maxCount.
	r.newRecords(int(min(int64(maxCount), hi-offset, maxPooledRecords)))
	var ents [entryBatch]consumequeue.Entry
	pos, scanned := offset, 0
	for pos < hi && scanned < s.cfg.MaxScanEntries {
		n, err := q.Get(pos, ents[:min(int64(entryBatch), hi-pos)])
		if err != nil {
			if !errors.Is(err, consumequeue.ErrOffsetTooSmall) {
				return fmt.Errorf("store: read consume queue %s/%d at %d: %w", topic, queueID, pos, err)
			}
			// Retention removed the head of the queue since GetMessage
			// read its bounds: what was read stands, or the caller is
			// told where the queue begins now (not an error).
			if len(r.Records) > 0 {
				break
			}
			r.Status, r.MinOffset, r.NextOffset = OffsetTooSmall, q.MinOffset(), q.MinOffset()
			return nil
		}
		if n == 0 {
			break
		}
		stop, err := s.readEntries(st, ents[:n], &pos, r)
		scanned += n
		if err != nil {
			return err
		}
		if stop {
			break
		}
	}
	r.NextOffset = pos
	switch {
	case len(r.Records) > 0:
		r.Status = Found
	case st.removing:
		r.Status = MessageWasRemoving
	default:
		r.Status = NoMatchedMessage
	}
	return nil
}

// readEntries handles a slice of ConsumeQueue entries starting at logical
// offset *pos, advancing *pos past each entry it consumed. It reports
// whether the batch is complete.
func (s *Store) readEntries(st *queueRead, ents []consumequeue.Entry, pos *int64, r *GetResult) (bool, error) {
	var prev consumequeue.Entry // the entry of the last record appended
	for i, e := range ents {
		if st.f != nil && !st.f.MatchTagsCode(e.TagsCode) {
			*pos++
			continue
		}
		if len(r.Records) > 0 && r.TotalBytes+int(e.Size) > st.maxBytes {
			return true, nil
		}
		if n := len(r.Records); n > 0 && e.PhysOffset == prev.PhysOffset && e.Size == prev.Size {
			// Another entry of the record just read (a record with one
			// entry per message): the same verified bytes, if it is also
			// the record of this offset.
			if rec := r.Records[n-1]; recordBelongs(rec, e.PhysOffset, st.topic, st.queueID, *pos) == nil {
				*pos++
				r.Records = append(r.Records, rec)
				r.TotalBytes += len(rec)
				if len(r.Records) >= st.maxCount {
					return true, nil
				}
				continue
			}
		}
		rec, err := s.readQueueRecord(st, ents[i:], *pos, r)
		if corruptErr(err) {
			// Read it again; if it is corrupt on disk it is isolated and
			// skipped (isolate.go).
			if rec, err = s.recheck(st, e, *pos, r, err); err == nil && rec == nil {
				*pos++
				continue
			}
		}
		if err != nil {
			if commitlog.IsNoRecord(err) {
				st.removing = true
				*pos++
				continue
			}
			if len(r.Records) > 0 {
				return true, nil // serve what is good; the next read reports the error
			}
			return true, err
		}
		*pos++
		if st.f != nil && recordType(rec) == record.RocketMQ && !st.f.MatchRecord(message.View(rec)) {
			continue
		}
		r.Records = append(r.Records, rec)
		r.TotalBytes += len(rec)
		prev = e
		if len(r.Records) >= st.maxCount {
			return true, nil
		}
	}
	return false, nil
}

// readQueueRecord returns the verified record of ents[0] (logical offset
// qo), reading ahead the following contiguous entries in one pread.
func (s *Store) readQueueRecord(st *queueRead, ents []consumequeue.Entry, qo int64, r *GetResult) ([]byte, error) {
	e := ents[0]
	n := int64(e.Size) + commitlog.TrailerBytes
	if e.PhysOffset < st.runStart || e.PhysOffset+n > st.runStart+int64(len(st.run)) {
		if err := s.loadRun(st, ents, r); err != nil {
			return nil, err
		}
	}
	entry := st.run[e.PhysOffset-st.runStart:][:n]
	if err := s.log.VerifyEntry(entry, e.PhysOffset, e.Size); err != nil {
		return nil, err
	}
	rec := entry[:e.Size]
	if err := recordBelongs(rec, e.PhysOffset, st.topic, st.queueID, qo); err != nil {
		return nil, err
	}
	return rec, nil
}

// loadRun reads ents[0] and the entries after it that are contiguous in
// the CommitLog (same segment, within maxRunReadBytes) with one pread.
// Without a filter every entry read is returned, so the run stops at the
// count and bytes the result still has room for.
func (s *Store) loadRun(st *queueRead, ents []consumequeue.Entry, r *GetResult) error {
	first := ents[0]
	end := first.PhysOffset + int64(first.Size) + commitlog.TrailerBytes
	segEnd := s.log.SegmentStart(first.PhysOffset) + s.log.SegmentBytes()
	limit := int64(maxRunReadBytes)
	if st.f == nil {
		ents = ents[:min(len(ents), max(st.maxCount-len(r.Records), 1))]
		limit = min(limit, int64(max(st.maxBytes-r.TotalBytes, 0))+int64(len(ents))*commitlog.TrailerBytes)
	}
	for _, e := range ents[1:] {
		next := end + int64(e.Size) + commitlog.TrailerBytes
		if e.PhysOffset != end || next > segEnd || next-first.PhysOffset > limit {
			break
		}
		end = next
	}
	buf := r.alloc(int(end - first.PhysOffset))
	err := s.log.ReadAt(buf, first.PhysOffset)
	if err != nil && end > first.PhysOffset+int64(first.Size)+commitlog.TrailerBytes {
		// Retry with the first entry alone (the run may cross a quarantined gap).
		buf = buf[:first.Size+commitlog.TrailerBytes]
		err = s.log.ReadAt(buf, first.PhysOffset)
	}
	if err != nil {
		st.run = nil
		return err
	}
	st.runStart, st.run = first.PhysOffset, buf
	return nil
}

// LookMessageByOffset returns a copy of the verified record at a CommitLog
// offset below the Confirmed watermark (Replicated under SYNC_FLUSH,
// Written under ASYNC_FLUSH). It does not wait for dispatch: a consumer
// woken by an OnVisible subscriber may look a record up before the
// dispatcher has moved Visible past it.
func (s *Store) LookMessageByOffset(physOffset int64) ([]byte, error) {
	if limit := s.confirmedLimit(); physOffset < 0 || physOffset >= limit {
		return nil, fmt.Errorf("store: offset %d is not below the confirmed offset %d: %w", physOffset, limit, commitlog.ErrBeyondEnd)
	}
	rec, err := s.log.ReadRecord(physOffset, nil)
	if corruptErr(err) {
		rec, err = s.rereadRecord(physOffset, err) // isolate.go
	}
	if err != nil {
		if !commitlog.IsNoRecord(err) {
			s.stats.corruptReads.Add(1)
			s.logger.Error("store: refusing to serve a record that fails verification", "offset", physOffset, "err", err)
		}
		return nil, err
	}
	if recordType(rec) == record.System {
		return nil, fmt.Errorf("store: offset %d holds a system record, not a message: %w", physOffset, commitlog.ErrNoRecord)
	}
	return rec, nil
}

// MinOffset returns the first logical offset still stored (0 for an
// unknown queue).
func (s *Store) MinOffset(topic string, queueID int32) int64 {
	if q := s.lookupQueue(topic, queueID); q != nil {
		return q.MinOffset()
	}
	return 0
}

// MaxOffset returns the next logical offset to become visible (exclusive
// end; 0 for an unknown queue).
func (s *Store) MaxOffset(topic string, queueID int32) int64 {
	if q := s.lookupQueue(topic, queueID); q != nil {
		return q.MaxOffset()
	}
	return 0
}

// entryStoreTime reads the store timestamp of the record of a ConsumeQueue entry.
func (s *Store) entryStoreTime(e consumequeue.Entry) (int64, error) {
	rec, err := s.log.ReadEntry(e.PhysOffset, e.Size, nil)
	if err != nil {
		return 0, err
	}
	return storeTimestamp(rec), nil
}

// OffsetByTime returns the first logical offset whose store time is >= tsMs;
// MaxOffset if every message is older, MinOffset if every one is newer.
func (s *Store) OffsetByTime(topic string, queueID int32, tsMs int64) int64 {
	q := s.lookupQueue(topic, queueID)
	if q == nil {
		return 0
	}
	off, err := q.SearchOffset(tsMs, s.entryStoreTime)
	if err != nil {
		s.logger.Warn("store: search offset by time", "topic", topic, "queue_id", queueID, "err", err)
		return q.MinOffset()
	}
	return off
}

// EarliestStoreTime returns the store time of the message at MinOffset.
func (s *Store) EarliestStoreTime(topic string, queueID int32) (int64, error) {
	q := s.lookupQueue(topic, queueID)
	if q == nil {
		return 0, fmt.Errorf("store: no queue %s/%d", topic, queueID)
	}
	var e [1]consumequeue.Entry
	n, err := q.Get(q.MinOffset(), e[:])
	if err != nil {
		return 0, fmt.Errorf("store: earliest store time of %s/%d: %w", topic, queueID, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("store: queue %s/%d is empty", topic, queueID)
	}
	return s.entryStoreTime(e[0])
}

// QueryByKey returns the CommitLog offsets (newest first, at most max) of
// the records of topic that have key as an index key (a RocketMQ
// message's KEYS token or UNIQ_KEY; a key Config.IndexKeys names for a
// record of another type), stored between beginMs and endMs. Each offset
// is verified to hold such a record.
func (s *Store) QueryByKey(topic, key string, max int, beginMs, endMs int64) ([]int64, error) {
	offs, err := s.index.Query(topic+"#"+key, max, beginMs, endMs)
	if err != nil {
		return nil, fmt.Errorf("store: query index: %w", err)
	}
	out := offs[:0]
	for _, off := range offs {
		rec, err := s.LookMessageByOffset(off)
		if err == nil && s.hasKey(rec, topic, key) && !slices.Contains(out, off) {
			out = append(out, off)
		}
	}
	return out, nil
}

// hasKey reports whether rec, a record of any type, is in topic with
// index key key.
func (s *Store) hasKey(rec []byte, topic, key string) bool {
	t := recordType(rec)
	if t == record.RocketMQ {
		v := message.View(rec)
		return string(v.Topic()) == topic &&
			(string(v.UniqKey()) == key || slices.ContainsFunc(bytes.Fields(v.Keys()), func(k []byte) bool { return string(k) == key }))
	}
	if !t.Enveloped() || t == record.System || s.cfg.IndexKeys == nil {
		return false
	}
	inTopic := false
	record.Envelope(rec).EachDest(func(_ int, dt []byte, _ int32, _, _ int64, _ int) error {
		inTopic = inTopic || string(dt) == topic
		return nil
	})
	found := false
	if inTopic {
		s.cfg.IndexKeys(rec, func(k []byte) { found = found || string(k) == key }) // an error: the keys named before it
	}
	return found
}

// Queues returns the queue ids of topic that have a ConsumeQueue, sorted.
func (s *Store) Queues(topic string) []int32 {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	ids := make([]int32, 0, len(s.queues[topic]))
	for id := range s.queues[topic] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// QueueEntry is where one ConsumeQueue entry points: its record's
// CommitLog offset and size (without the CRC trailer). The entries of a
// record that holds several messages of the queue point at the same
// record.
type QueueEntry struct {
	PhysOffset int64
	Size       int32
}

// QueueEntries copies up to len(dst) entries of a queue from offset into
// dst and returns how many: 0 at or past MaxOffset or for an unknown
// queue; an offset below MinOffset fails.
func (s *Store) QueueEntries(topic string, queueID int32, offset int64, dst []QueueEntry) (int, error) {
	q := s.lookupQueue(topic, queueID)
	if q == nil || len(dst) == 0 {
		return 0, nil
	}
	var buf [64]consumequeue.Entry
	done := 0
	for done < len(dst) {
		n, err := q.Get(offset+int64(done), buf[:min(len(buf), len(dst)-done)])
		if err != nil {
			return done, fmt.Errorf("store: entries of %s/%d at %d: %w", topic, queueID, offset+int64(done), err)
		}
		if n == 0 {
			break
		}
		for i := range n {
			dst[done+i] = QueueEntry{PhysOffset: buf[i].PhysOffset, Size: buf[i].Size}
		}
		done += n
	}
	return done, nil
}
