package store

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
)

// putReq is one PutMessage(s) call waiting to be written, possibly combined
// with others into one write.
type putReq struct {
	msgs []*message.Message
	recs [][]byte // encoded records, aliasing buf
	buf  []byte

	// Set by the combining writer under appendMu.
	done bool
	end  int64
	err  error
}

var encodeBufPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledEncodeBuf bounds the buffers kept in encodeBufPool.
const maxPooledEncodeBuf = 1 << 20

// PutMessage appends one message. See PutMessages.
func (s *Store) PutMessage(ctx context.Context, m *message.Message) PutResult {
	one := [1]*message.Message{m}
	return s.PutMessages(ctx, one[:])
}

// PutMessages appends a batch with one write: all messages are written or
// none is acknowledged. On PutOK the store has set QueueOffset, PhysOffset
// and StoreTimestamp of every message. Under SYNC_FLUSH it returns only after
// an fdatasync covered the batch (unless a message has the property WAIT =
// "false", as RocketMQ allows), PutFlushDiskTimeout after SyncFlushTimeout,
// and PutUnknownError if ctx ends first; in those cases the messages are
// written and may still become durable and visible (at-least-once).
func (s *Store) PutMessages(ctx context.Context, ms []*message.Message) PutResult {
	if len(ms) == 0 {
		return PutResult{Status: PutMessageIllegal, Err: errors.New("store: empty batch")}
	}
	if r, ok := s.refusePut(); !ok {
		return r
	}
	if err := ctx.Err(); err != nil {
		return PutResult{Status: PutUnknownError, Err: fmt.Errorf("store: not written: %w", err)}
	}
	req, r := s.encode(ms)
	if r.Status != PutOK {
		return r
	}
	end, err := s.appendCombined(req)
	s.releaseEncodeBuf(req)
	if err != nil {
		return s.putFailure(err)
	}
	s.stats.puts.Add(1)
	s.stats.putMsgs.Add(int64(len(ms)))
	if s.cfg.FlushDiskType == AsyncFlush || !waitStoreMsgOK(ms) {
		return PutResult{Status: PutOK}
	}
	return s.waitFlushed(ctx, end)
}

func (s *Store) refusePut() (PutResult, bool) {
	if s.closed.Load() {
		return PutResult{Status: PutServiceNotAvailable, Err: ErrClosed}, false
	}
	if err := s.Err(); err != nil {
		return PutResult{Status: PutServiceNotAvailable, Err: err}, false
	}
	if p := s.diskFull.Load(); p != nil {
		return PutResult{Status: PutDiskFull, Err: *p}, false
	}
	return PutResult{}, true
}

func waitStoreMsgOK(ms []*message.Message) bool {
	for _, m := range ms {
		if v, ok := message.Property(m.Properties, message.PropWaitStoreMsgOK); ok && v == "false" {
			return false
		}
	}
	return true
}

func (s *Store) waitFlushed(ctx context.Context, end int64) PutResult {
	err := s.log.WaitFlushed(ctx, end, s.cfg.SyncFlushTimeout)
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
	case errors.Is(err, commitlog.ErrFailed) || errors.Is(err, ErrReadOnly):
		return PutResult{Status: PutServiceNotAvailable, Err: fmt.Errorf("%w: %w", ErrReadOnly, err)}
	default:
		return PutResult{Status: PutUnknownError, Err: err}
	}
}

// encode validates and encodes ms outside any lock.
func (s *Store) encode(ms []*message.Message) (*putReq, PutResult) {
	bp := encodeBufPool.Get().(*[]byte)
	req := &putReq{msgs: ms, recs: make([][]byte, len(ms)), buf: (*bp)[:0]}
	starts := make([]int, len(ms)+1)
	for i, m := range ms {
		if r := s.validate(m); r.Status != PutOK {
			return nil, r
		}
		starts[i] = len(req.buf)
		var err error
		if req.buf, err = m.AppendStored(req.buf); err != nil {
			return nil, PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: encode message %d: %w", i, err)}
		}
	}
	starts[len(ms)] = len(req.buf)
	for i := range ms {
		req.recs[i] = req.buf[starts[i]:starts[i+1]]
	}
	if n := int64(len(req.buf)); n > s.maxBatchBytes() {
		return nil, PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: batch of %d bytes exceeds the limit %d", n, s.maxBatchBytes())}
	}
	return req, PutResult{Status: PutOK}
}

// maxBatchBytes keeps one batch well inside one segment.
func (s *Store) maxBatchBytes() int64 { return s.cfg.CommitLogSegmentBytes / 2 }

func (s *Store) releaseEncodeBuf(req *putReq) {
	if cap(req.buf) <= maxPooledEncodeBuf {
		b := req.buf[:0]
		encodeBufPool.Put(&b)
	}
	req.buf, req.recs = nil, nil
}

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
// returns the CommitLog offset after req's records.
func (s *Store) appendCombined(req *putReq) (int64, error) {
	s.pendMu.Lock()
	s.pending = append(s.pending, req)
	s.pendMu.Unlock()

	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if req.done {
		return req.end, req.err
	}
	s.pendMu.Lock()
	batch := s.pending
	s.pending = nil
	s.pendMu.Unlock()
	s.writeBatch(batch)
	return req.end, req.err
}

// writeBatch writes the records of reqs with one Append, assigning queue
// offsets, physical offsets and the store timestamp. appendMu is held.
func (s *Store) writeBatch(reqs []*putReq) {
	err := s.writable()
	var end int64
	if err == nil {
		end, err = s.appendRecords(reqs)
	}
	for _, r := range reqs {
		r.err = err
		r.done = true
	}
	if err == nil {
		s.assignEnds(reqs)
	}
	_ = end
}

func (s *Store) writable() error {
	if s.closed.Load() {
		return ErrClosed
	}
	return s.Err()
}

func (s *Store) appendRecords(reqs []*putReq) (int64, error) {
	var recs [][]byte
	var msgs []*message.Message
	if len(reqs) == 1 {
		recs, msgs = reqs[0].recs, reqs[0].msgs
	} else {
		for _, r := range reqs {
			recs = append(recs, r.recs...)
			msgs = append(msgs, r.msgs...)
		}
	}
	now := s.cfg.Now().UnixMilli()
	end, err := s.log.Append(recs, func(i int, rec []byte, phys int64) {
		m := msgs[i]
		qo := s.nextQueueOffset(m.Topic, m.QueueID)
		message.PatchStored(rec, qo, phys, now)
		m.QueueOffset, m.PhysOffset, m.StoreTimestamp = qo, phys, now
	})
	if err != nil {
		return 0, err
	}
	var n int64
	for _, r := range recs {
		n += int64(len(r))
	}
	s.stats.putBytes.Add(n)
	s.noteWritten(n)
	return end, nil
}

// assignEnds sets each request's end offset: the end of its last record.
func (s *Store) assignEnds(reqs []*putReq) {
	for _, r := range reqs {
		last := r.msgs[len(r.msgs)-1]
		r.end = last.PhysOffset + int64(len(r.recs[len(r.recs)-1])) + commitlog.TrailerBytes
	}
}

// nextQueueOffset assigns the next offset of (topic, queueID). appendMu is
// held.
func (s *Store) nextQueueOffset(topic string, queueID int32) int64 {
	byID := s.counters[topic]
	if byID == nil {
		byID = map[int32]int64{}
		s.counters[topic] = byID
	}
	qo := byID[queueID]
	byID[queueID] = qo + 1
	return qo
}
