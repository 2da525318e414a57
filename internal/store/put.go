package store

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
)

// putReq is one PutMessage(s) call waiting to be written, possibly combined
// with others into one write. Requests are pooled with their buffers.
type putReq struct {
	msgs   []*message.Message
	one    [1]*message.Message // backs msgs for PutMessage
	recs   [][]byte            // encoded records, aliasing buf
	starts []int
	buf    []byte
	// logical is the number of logical messages of recs. For a record
	// of an enveloped type (PutRecord) msgs is [nil] and recPhys is set
	// to its CommitLog offset at append.
	logical   int64
	recPhys   int64
	bodyPatch BodyPatch // AppendRecordPatched's hook (nil: none)
	// recsPhys, when set (AppendRecords), gets each record's CommitLog
	// offset at append; nils backs msgs for a request of several records.
	recsPhys []int64
	nils     []*message.Message

	// Set by the combining writer under appendMu.
	done bool
	end  int64
	err  error
}

var putReqPool = sync.Pool{New: func() any { return new(putReq) }}

// maxPooledEncodeBuf bounds the encode buffers kept in putReqPool.
const maxPooledEncodeBuf = 1 << 20

// PutMessage appends one message. See PutMessages.
func (s *Store) PutMessage(ctx context.Context, m *message.Message) PutResult {
	req := putReqPool.Get().(*putReq)
	req.one[0] = m
	return s.put(ctx, req, req.one[:])
}

// PutMessages appends a batch with one write: all messages are written or
// none is acknowledged. On PutOK the store has set QueueOffset, PhysOffset
// and StoreTimestamp of every message. Under SYNC_FLUSH it returns only after
// an fdatasync covered the batch (unless a message has the property WAIT =
// "false", as RocketMQ allows), PutFlushDiskTimeout after SyncFlushTimeout,
// and PutUnknownError if ctx ends first; in those cases the messages are
// written and may still become durable and visible (at-least-once).
func (s *Store) PutMessages(ctx context.Context, ms []*message.Message) PutResult {
	return s.put(ctx, putReqPool.Get().(*putReq), ms)
}

// PutMessagesDeferred is PutMessages for a caller that must not block
// until the batch is durable (the broker's send path: a goroutine parked
// per message, all woken at every group commit, was the latency tail).
// When the result is known at once (an error, ASYNC_FLUSH, WAIT = false)
// it returns it with pending false and never calls done. Otherwise, under
// SYNC_FLUSH, the messages are written (offsets set as on PutOK) and it
// returns pending true; done is then called exactly once with what
// PutMessages would have returned (PutOK after an fdatasync covered the
// batch, PutFlushDiskTimeout after SyncFlushTimeout, PutServiceNotAvailable
// after a failed fsync), from the store's acknowledger goroutine, possibly
// before PutMessagesDeferred returns. done must not block: that goroutine
// acknowledges every deferred put. ctx is not consulted once the batch is
// written.
func (s *Store) PutMessagesDeferred(ctx context.Context, ms []*message.Message, done func(PutResult)) (res PutResult, pending bool) {
	end, r := s.appendPut(ctx, putReqPool.Get().(*putReq), ms)
	if end < 0 {
		return r, false
	}
	s.marks.confirmed.Notify(end, s.confirmTimeout(), func(err error) { done(s.confirmResult(end, err)) })
	return PutResult{}, true
}

// put is PutMessages with a request from putReqPool, which it returns (ms
// may alias it: it is not used after the release).
func (s *Store) put(ctx context.Context, req *putReq, ms []*message.Message) PutResult {
	end, r := s.appendPut(ctx, req, ms)
	if end < 0 {
		return r
	}
	return s.waitFlushed(ctx, end)
}

// appendPut appends ms and returns the CommitLog offset the caller must
// wait to be flushed, or -1 and the final result (an error, or PutOK
// without a flush to wait for).
func (s *Store) appendPut(ctx context.Context, req *putReq, ms []*message.Message) (int64, PutResult) {
	s.appending.Add(1)
	end, r := s.putAppend(ctx, req, ms)
	s.appendDone()
	n, wait := req.logical, s.waitsForConfirmed() && r.Status == PutOK && !ackAtWrite(ms)
	releaseReq(req)
	if r.Status != PutOK {
		return -1, r
	}
	s.notePut()
	s.stats.putMsgs.Add(n)
	if !wait {
		return -1, PutResult{Status: PutOK}
	}
	return end, PutResult{}
}

// putAppend validates, encodes and appends ms and returns the CommitLog
// offset after them.
func (s *Store) putAppend(ctx context.Context, req *putReq, ms []*message.Message) (int64, PutResult) {
	if r := s.preparePut(ctx, req, ms); r.Status != PutOK {
		return 0, r
	}
	end, err := s.appendCombined(req)
	if err != nil {
		return 0, s.putFailure(err)
	}
	return end, PutResult{Status: PutOK}
}

// preparePut runs a put's checks and encodes ms into req (PutOK: ready
// for appendCombined).
func (s *Store) preparePut(ctx context.Context, req *putReq, ms []*message.Message) PutResult {
	if len(ms) == 0 {
		return PutResult{Status: PutMessageIllegal, Err: errors.New("store: empty batch")}
	}
	if r, ok := s.refusePut(); !ok {
		return r
	}
	if r, ok := s.gatePut(req, ms); !ok { // gate.go
		return r
	}
	if err := ctx.Err(); err != nil {
		return PutResult{Status: PutUnknownError, Err: fmt.Errorf("store: not written: %w", err)}
	}
	if ms[0] == nil {
		// PutRecord: recs is set.
	} else if r := s.encode(req, ms); r.Status != PutOK {
		return r
	}
	return PutResult{Status: PutOK}
}

// releaseReq returns req to the pool, keeping a buffer of reasonable size.
func releaseReq(req *putReq) {
	clear(req.recs)
	buf := req.buf[:0]
	if cap(buf) > maxPooledEncodeBuf {
		buf = nil
	}
	*req = putReq{recs: req.recs[:0], starts: req.starts[:0], buf: buf, nils: req.nils[:0]}
	putReqPool.Put(req)
}

func (s *Store) refusePut() (PutResult, bool) {
	if s.closed.Load() {
		return PutResult{Status: PutServiceNotAvailable, Err: ErrClosed}, false
	}
	if err := s.Err(); err != nil {
		return PutResult{Status: PutServiceNotAvailable, Err: err}, false
	}
	if s.cfg.Replica {
		return PutResult{Status: PutServiceNotAvailable, Err: ErrReplica}, false
	}
	if p := s.diskFullNow(); p != nil {
		return PutResult{Status: PutDiskFull, Err: *p}, false
	}
	return PutResult{}, true
}

// waitFlushed waits for the Confirmed watermark to pass end.
func (s *Store) waitFlushed(ctx context.Context, end int64) PutResult {
	return s.confirmResult(end, s.marks.confirmed.Wait(ctx, end, s.confirmTimeout()))
}

// flushResult maps the outcome of waiting for a flush to a put result.
func flushResult(err error) PutResult {
	switch {
	case err == nil:
		return PutResult{Status: PutOK}
	case errors.Is(err, commitlog.ErrFlushTimeout):
		return PutResult{Status: PutFlushDiskTimeout, Err: err}
	case errors.Is(err, commitlog.ErrFailed):
		return PutResult{Status: PutServiceNotAvailable, Err: fmt.Errorf("%w: %w", ErrReadOnly, err)}
	default:
		return PutResult{Status: PutUnknownError, Err: fmt.Errorf("store: message written but not acknowledged: %w", err)}
	}
}

func (s *Store) putFailure(err error) PutResult {
	switch {
	case errors.Is(err, ErrClosed):
		return PutResult{Status: PutServiceNotAvailable, Err: err}
	case errors.Is(err, commitlog.ErrNoSpace):
		return PutResult{Status: PutDiskFull, Err: fmt.Errorf("%w: %w", ErrNoSpace, err)}
	case errors.Is(err, ErrDiskFull):
		return PutResult{Status: PutDiskFull, Err: err}
	case errors.Is(err, commitlog.ErrFailed) || errors.Is(err, ErrReadOnly):
		return PutResult{Status: PutServiceNotAvailable, Err: fmt.Errorf("%w: %w", ErrReadOnly, err)}
	default:
		return PutResult{Status: PutUnknownError, Err: err}
	}
}

// encode validates and encodes ms into req outside any lock.
func (s *Store) encode(req *putReq, ms []*message.Message) PutResult {
	total := 0
	for _, m := range ms {
		if r := s.validate(m); r.Status != PutOK {
			return r
		}
		total += m.StoredSize()
	}
	// One allocation of the exact size (pooled buffers are dropped at
	// every GC, so growing record by record reallocated most batches).
	req.msgs, req.buf, req.logical = ms, slices.Grow(req.buf[:0], total), int64(len(ms))
	starts := req.starts[:0]
	for i, m := range ms {
		starts = append(starts, len(req.buf))
		var err error
		if req.buf, err = m.AppendStored(req.buf); err != nil {
			return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: encode message %d: %w", i, err)}
		}
	}
	req.starts = append(starts, len(req.buf))
	recs := req.recs[:0]
	for i := range ms {
		recs = append(recs, req.buf[req.starts[i]:req.starts[i+1]])
	}
	req.recs = recs
	if n := int64(len(req.buf)); n > s.maxBatchBytes() {
		return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: batch of %d bytes exceeds the limit %d", n, s.maxBatchBytes())}
	}
	return PutResult{Status: PutOK}
}

// maxBatchBytes keeps one batch well inside one segment.
func (s *Store) maxBatchBytes() int64 { return s.cfg.CommitLogSegmentBytes / 2 }

func (s *Store) validate(m *message.Message) PutResult {
	switch {
	case m == nil:
		return PutResult{Status: PutMessageIllegal, Err: errors.New("store: nil message")}
	case m.Topic == "" || len(m.Topic) > message.MaxTopicBytes:
		return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: topic length %d not in [1, %d]", len(m.Topic), message.MaxTopicBytes)}
	case m.QueueID < 0:
		return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: negative queue id %d", m.QueueID)}
	case len(m.Body) > s.cfg.MaxMessageBytes:
		return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: body of %d bytes exceeds MaxMessageBytes %d", len(m.Body), s.cfg.MaxMessageBytes)}
	case len(m.Properties) > message.MaxPropertiesBytes:
		return PutResult{Status: PutPropertiesTooLong, Err: fmt.Errorf("store: properties of %d bytes exceed %d", len(m.Properties), message.MaxPropertiesBytes)}
	}
	return PutResult{Status: PutOK}
}

// appendCombined queues req and writes it, together with every request
// queued meanwhile, in one CommitLog append (group commit of writes). It
// returns the CommitLog offset after req's records. One append takes at
// most maxCombinedBytes of records, and at most half a segment (and at
// least one request), so the write buffer stays bounded however many
// requests are queued and every append fits in one segment (a full disk
// then never fails the log: see commitlog.Append); a request left queued is
// written by the next holder of appendMu, possibly its own caller.
func (s *Store) appendCombined(req *putReq) (int64, error) {
	s.appendQueued(req)
	return req.end, req.err
}

// appendQueued queues reqs, next to each other and in order, and writes
// them with whatever else is queued (appendCombined); each request gets
// its own end and error. Requests are written in the order they were
// queued, so once the last of reqs is done all of them are.
func (s *Store) appendQueued(reqs ...*putReq) {
	s.pendMu.Lock()
	s.pending = append(s.pending, reqs...)
	s.pendMu.Unlock()

	last := reqs[len(reqs)-1]
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	for !last.done {
		s.pendMu.Lock()
		n, bytes, limit := 0, 0, int(min(maxCombinedBytes, s.maxBatchBytes()))
		for n < len(s.pending) && (n == 0 || bytes+len(s.pending[n].buf) <= limit) {
			bytes += len(s.pending[n].buf)
			n++
		}
		batch := append(s.spare[:0], s.pending[:n]...)
		rest := copy(s.pending, s.pending[n:])
		clear(s.pending[rest:])
		s.pending = s.pending[:rest]
		s.pendMu.Unlock()
		s.writeBatch(batch)
		clear(batch)
		s.spare = batch
	}
}

// maxCombinedBytes bounds the records one combined append writes.
const maxCombinedBytes = 4 << 20

// writeBatch writes the records of reqs with one Append, assigning queue
// offsets, physical offsets and the store timestamp. appendMu is held.
func (s *Store) writeBatch(reqs []*putReq) {
	err := s.writable()
	if err == nil {
		err = s.admitWrite(reqs) // space.go
	}
	if err == nil {
		err = s.appendRecords(reqs)
	}
	for _, r := range reqs {
		r.err = err
		r.done = true
	}
	if err == nil {
		s.assignEnds(reqs)
	}
}

func (s *Store) writable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.Err()
}

func (s *Store) appendRecords(reqs []*putReq) error {
	recs, msgs := reqs[0].recs, reqs[0].msgs
	if len(reqs) > 1 {
		recs, msgs = s.batchRecs[:0], s.batchMsgs[:0]
		for _, r := range reqs {
			recs = append(recs, r.recs...)
			msgs = append(msgs, r.msgs...)
		}
		defer func() {
			clear(recs)
			clear(msgs)
			s.batchRecs, s.batchMsgs = recs[:0], msgs[:0]
		}()
	}
	now := s.cfg.Now().UnixMilli()
	patched := 0
	_, err := s.log.Append(recs, func(i int, rec []byte, phys int64) {
		m := msgs[i]
		if m == nil {
			s.patchEnvelope(reqs, i, rec, phys, now)
			patched = i + 1
			return
		}
		qo := s.nextQueueOffset(m.Topic, m.QueueID)
		message.PatchStored(rec, qo, phys, now)
		m.QueueOffset, m.PhysOffset, m.StoreTimestamp = qo, phys, now
		patched = i + 1
	})
	if err != nil {
		if errors.Is(err, commitlog.ErrNoSpace) {
			// Nothing was written: give the queue offsets back, so the
			// next put takes them and the queues stay dense.
			s.returnQueueOffsets(msgs[:patched], recs[:patched])
		}
		return err
	}
	var n int64
	for _, r := range recs {
		n += int64(len(r))
	}
	s.stats.putBytes.Add(n)
	return nil
}

// assignEnds sets each request's end offset: the end of its last record.
func (s *Store) assignEnds(reqs []*putReq) {
	for _, r := range reqs {
		last, phys := r.msgs[len(r.msgs)-1], r.recPhys
		if last != nil {
			phys = last.PhysOffset
		}
		r.end = phys + int64(len(r.recs[len(r.recs)-1])) + commitlog.TrailerBytes
	}
}

// nextQueueOffset assigns the next offset of (topic, queueID). appendMu is
// held.
func (s *Store) nextQueueOffset(topic string, queueID int32) int64 {
	return s.reserveQueueOffsets(topic, queueID, 1)
}

// reserveQueueOffsets assigns the next n offsets of (topic, queueID) and
// returns the first. appendMu is held.
func (s *Store) reserveQueueOffsets(topic string, queueID int32, n int64) int64 {
	byID := s.counterMap(topic)
	qo := byID[queueID]
	byID[queueID] = qo + n
	return qo
}

// counterMap returns the queue offset counters of topic, creating them.
// appendMu is held (or recovery runs alone).
func (s *Store) counterMap(topic string) map[int32]int64 {
	byID := s.counters[topic]
	if byID == nil {
		byID = map[int32]int64{}
		s.counters[topic] = byID
	}
	return byID
}

// returnQueueOffsets undoes nextQueueOffset for the records of a batch
// that was not written: ms, or for an enveloped record (nil in ms) the
// destinations of recs[i]. appendMu is held.
func (s *Store) returnQueueOffsets(ms []*message.Message, recs [][]byte) {
	for i, m := range ms {
		if m == nil {
			returnEnvelopeOffsets(s, recs[i])
			continue
		}
		s.counters[m.Topic][m.QueueID]--
		m.QueueOffset, m.PhysOffset, m.StoreTimestamp = 0, 0, 0
	}
}

// beforeFlush is the CommitLog's BeforeFlush hook: under SYNC_FLUSH, with a
// GroupCommitDelay or a CommitDelay, gatherFlush.
func (s *Store) beforeFlush() func() {
	if s.cfg.FlushDiskType != SyncFlush || s.cfg.GroupCommitDelay < 0 && s.cfg.CommitDelay <= 0 {
		return nil
	}
	return s.gatherFlush
}

// appendDone ends a put's encode-and-append phase and wakes gatherFlush
// when it was the last one.
func (s *Store) appendDone() {
	if s.appending.Add(-1) == 0 && s.gatherWait.Load() {
		select {
		case s.appendIdle <- struct{}{}:
		default:
		}
	}
}

// notePut counts a put written (stats.puts) and wakes gatherFlush, which
// may be waiting for it.
func (s *Store) notePut() {
	s.stats.puts.Add(1)
	if s.gatherWait.Load() {
		select {
		case s.appendIdle <- struct{}{}:
		default:
		}
	}
}

// onFlush is the CommitLog's OnFlush hook: it notes the puts written when
// the flush ended, before its waiters are answered, then calls
// Config.OnFlush.
func (s *Store) onFlush(d time.Duration, bytes int64) {
	s.putsAtFlushEnd.Store(s.stats.puts.Load())
	if s.cfg.OnFlush != nil {
		s.cfg.OnFlush(d, bytes)
	}
}

// gatherFlush runs before a flush a waiter asked for. Writers answered by
// the previous flush come back with their next message, and flushing the
// moment the first of them asks would cover only that one: the others
// would wait for one more fdatasync. So it first yields (the woken writers
// run until they block), then waits, at most GroupCommitDelay, while puts
// are being encoded or appended, and until as many puts were written since
// the previous flush ended as that flush took (the writers it answered are
// back, or as many others came). A lone writer, whose flushes take one put
// each, pays only the yield. With a CommitDelay, a flush after one that
// took CommitSiblings puts or more first waits that long.
func (s *Store) gatherFlush() {
	defer s.noteGather()
	if s.cfg.CommitDelay > 0 && s.lastGroup >= int64(s.cfg.CommitSiblings) {
		s.delayCommit()
	}
	if s.cfg.GroupCommitDelay < 0 {
		return
	}
	runtime.Gosched()
	if s.gathered() {
		return
	}
	t := time.NewTimer(s.cfg.GroupCommitDelay)
	defer t.Stop()
	defer s.gatherWait.Store(false)
	for {
		s.gatherWait.Store(true)
		if s.gathered() {
			return
		}
		select {
		case <-s.appendIdle:
		case <-t.C:
			return
		case <-s.stop:
			return
		}
	}
}

// delayCommit waits CommitDelay (or until the store closes): the previous
// flush took CommitSiblings puts or more, so more are on their way.
func (s *Store) delayCommit() {
	s.stats.delayedCommits.Add(1)
	t := time.NewTimer(s.cfg.CommitDelay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.stop:
	}
}

// gathered reports whether gatherFlush is done waiting: no put is being
// appended and the previous flush's group has come again.
func (s *Store) gathered() bool {
	return s.appending.Load() == 0 && s.stats.puts.Load()-s.putsAtFlushEnd.Load() >= s.lastGroup
}

// noteGather records, as gatherFlush returns, the puts written since it
// last returned: about what the flush it precedes takes.
func (s *Store) noteGather() {
	now := s.stats.puts.Load()
	s.lastGroup, s.putsAtGather = now-s.putsAtGather, now
}
