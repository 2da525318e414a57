package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/keelmq/keel/internal/message"

	"github.com/keelmq/keel/internal/store/record"
)

// PutRecord appends one record of an enveloped type (a Kafka batch, an AMQP
// message, a system record; see package record), built with
// record.AppendEnvelope. The store sets its STORETIMESTAMP and
// PHYSICALOFFSET and the queue offset of each destination (dense per
// queue, shared with RocketMQ messages of the same queue), so one record
// gets one ConsumeQueue entry per destination, or, with
// record.FlagEntryPerMessage, one per logical message: n consecutive
// queue offsets from the destination's QUEUEOFFSET. It returns what PutMessages
// would (waiting for Confirmed under SYNC_FLUSH or replication) and the record's CommitLog
// offset (-1 if not written). rec is not kept.
// MaxRecordBodyBytes is the largest body a record put whole may carry
// (Config.MaxRecordBodyBytes, at least MaxMessageBytes).
func (s *Store) MaxRecordBodyBytes() int { return s.cfg.maxBodyBytes() }

func (s *Store) PutRecord(ctx context.Context, rec []byte) (PutResult, int64) {
	r, phys, end := s.AppendRecord(ctx, rec)
	if r.Status == PutOK && s.waitsForConfirmed() {
		r = s.waitFlushed(ctx, end)
	}
	return r, phys
}

// PutRecordDeferred is PutRecord without a goroutine parked per record:
// the record is appended before it returns (records put from one
// goroutine are appended in call order) and, when the result is known at
// once (an error, ASYNC_FLUSH without replication), it is returned with
// pending false and done is never called. Otherwise it returns pending
// true and done is called exactly once with what PutRecord would return,
// from the store's acknowledger goroutine (done must not block), possibly
// before PutRecordDeferred returns. phys, returned and passed to done, is
// the record's CommitLog offset (-1 if not written).
func (s *Store) PutRecordDeferred(ctx context.Context, rec []byte, done func(r PutResult, phys int64)) (res PutResult, phys int64, pending bool) {
	r, phys, end := s.AppendRecord(ctx, rec)
	if r.Status != PutOK || !s.waitsForConfirmed() {
		return r, phys, false
	}
	s.marks.confirmed.Notify(end, s.confirmTimeout(), func(err error) { done(s.confirmResult(end, err), phys) })
	return PutResult{}, phys, true
}

// AppendRecord is PutRecord without the wait: it returns once the record
// is written (in the CommitLog's page cache), with its CommitLog offset
// and the offset its bytes end at (-1, -1 if not written). A caller that
// acknowledges durably waits for Confirmed to reach end itself (WaitFor,
// Notify), so that it need not hold its own locks across a group commit.
func (s *Store) AppendRecord(ctx context.Context, rec []byte) (r PutResult, phys, end int64) {
	return s.AppendRecordPatched(ctx, rec, nil)
}

// BodyPatch is AppendRecordPatched's hook. It is called under the store's
// append lock once the record's queue offsets are assigned and before its
// CommitLog CRC is computed, once per destination in order, with the
// record's body (in the store's write buffer) and the first queue offset
// the destination got and the record's store time (ms). It may rewrite
// bytes of body in place (never its length); it must not block or call
// the store. It may be called again
// for the same record when an append that found the disk full is retried;
// the last call's offsets are the record's.
type BodyPatch func(body []byte, dest int, firstQueueOffset, storeTimeMs int64)

// AppendRecordPatched is AppendRecord with patch (nil: none) applied to
// the body as it is appended, so a body may carry the queue offsets the
// store assigns (a Kafka batch's base offset).
func (s *Store) AppendRecordPatched(ctx context.Context, rec []byte, patch BodyPatch) (r PutResult, phys, end int64) {
	if err := checkRecord(rec); err != nil {
		return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: put record: %w", err)}, -1, -1
	}
	if t := recordType(rec); !t.Enveloped() {
		return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: put record: a %v goes through PutMessages", t)}, -1, -1
	}
	if n := int64(len(rec)); n > s.maxBatchBytes() || n > s.cfg.maxRecordBytes() {
		return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: record of %d bytes exceeds the limit %d", n, min(s.maxBatchBytes(), s.cfg.maxRecordBytes()))}, -1, -1
	}
	req := putReqPool.Get().(*putReq)
	req.buf = append(req.buf[:0], rec...)
	req.recs = append(req.recs[:0], req.buf)
	req.one[0] = nil
	req.msgs = req.one[:]
	req.logical = int64(record.Envelope(rec).Messages())
	req.bodyPatch = patch
	s.appending.Add(1)
	end, r = s.putAppend(ctx, req, req.msgs)
	s.appendDone()
	phys, n := req.recPhys, req.logical
	releaseReq(req)
	if r.Status != PutOK {
		return r, -1, -1
	}
	s.notePut()
	s.stats.putMsgs.Add(n)
	return r, phys, end
}

// patchEnvelope is Append's patch of the enveloped record i of the
// combined batch of reqs: its offset, store time and the queue offsets of
// its destinations. appendMu is held.
func (s *Store) patchEnvelope(reqs []*putReq, i int, rec []byte, phys, now int64) {
	var req *putReq
	for _, r := range reqs {
		if i < len(r.recs) {
			req = r
			break
		}
		i -= len(r.recs)
	}
	e := record.Envelope(rec)
	e.Patch(phys, now)
	n := e.Entries()
	e.EachDest(func(d int, topic []byte, qid int32, _, _ int64, at int) error {
		qo := s.reserveQueueOffsets(string(topic), qid, n)
		e.PatchQueueOffset(at, qo)
		if req != nil && req.bodyPatch != nil {
			req.bodyPatch(e.Body(), d, qo, now)
		}
		return nil
	})
	if req != nil {
		req.recPhys = phys
		if req.recsPhys != nil {
			req.recsPhys[i] = phys
		}
	}
}

// returnEnvelopeOffsets gives back the queue offsets an enveloped record
// that was not written took. appendMu is held.
func returnEnvelopeOffsets(s *Store, rec []byte) {
	n := record.Envelope(rec).Entries()
	record.Envelope(rec).EachDest(func(_ int, topic []byte, qid int32, _, _ int64, _ int) error {
		s.counters[string(topic)][qid] -= n
		return nil
	})
}

// AppendRecords is AppendRecord for several records with one combined
// append: one group-commit entry, written in order, all or none. Each of
// recs must be a record AppendRecord takes (CheckRecord tells); phys,
// of len(recs), gets each record's CommitLog offset (-1 if not written). It returns the
// offset the last record's bytes end at (-1 if not written): under
// SYNC_FLUSH the caller acknowledges every record once Confirmed reached
// it (Notify, WaitFor). recs are not kept.
func (s *Store) AppendRecords(ctx context.Context, recs [][]byte, phys []int64) (r PutResult, end int64) {
	if len(recs) == 0 || len(phys) != len(recs) {
		return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: append records: %d records, %d offsets", len(recs), len(phys))}, -1
	}
	for i := range phys {
		phys[i] = -1
	}
	size := 0
	for _, rec := range recs {
		if err := s.CheckRecord(rec); err != nil {
			return PutResult{Status: PutMessageIllegal, Err: err}, -1
		}
		size += len(rec)
	}
	if n := int64(size); n > s.maxBatchBytes() {
		return PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: append records: %d bytes exceed the limit %d", n, s.maxBatchBytes())}, -1
	}
	req := putReqPool.Get().(*putReq)
	req.buf = slices.Grow(req.buf[:0], size)
	var logical int64
	for _, rec := range recs {
		at := len(req.buf)
		req.buf = append(req.buf, rec...)
		req.recs = append(req.recs, req.buf[at:len(req.buf):len(req.buf)])
		logical += int64(record.Envelope(rec).Messages())
	}
	req.nils = append(req.nils[:0], make([]*message.Message, len(recs))...)
	req.msgs = req.nils
	req.logical = logical
	req.recsPhys = phys
	s.appending.Add(1)
	end, r = s.putAppend(ctx, req, req.msgs)
	s.appendDone()
	clear(req.nils)
	releaseReq(req)
	if r.Status != PutOK {
		for i := range phys {
			phys[i] = -1
		}
		return r, -1
	}
	s.notePut()
	s.stats.putMsgs.Add(logical)
	return r, end
}

// CheckRecord reports whether AppendRecord would take rec: a well-formed
// record of an enveloped type within the record size limits.
func (s *Store) CheckRecord(rec []byte) error {
	if err := checkRecord(rec); err != nil {
		return fmt.Errorf("store: put record: %w", err)
	}
	if t := recordType(rec); !t.Enveloped() {
		return fmt.Errorf("store: put record: a %v goes through PutMessages", t)
	}
	if n := int64(len(rec)); n > s.maxBatchBytes() || n > s.cfg.maxRecordBytes() {
		return fmt.Errorf("store: record of %d bytes exceeds the limit %d", n, min(s.maxBatchBytes(), s.cfg.maxRecordBytes()))
	}
	return nil
}

// PutRecordsDeferred is PutRecordDeferred for several records put with
// one AppendRecords: all written or none, phys set as there, and one
// result for all (every record is confirmed when the last is). When the
// result is known at once it is returned with pending false and done is
// never called; otherwise done is called exactly once, from the store's
// acknowledger goroutine (done must not block), possibly before
// PutRecordsDeferred returns.
func (s *Store) PutRecordsDeferred(ctx context.Context, recs [][]byte, phys []int64, done func(PutResult)) (res PutResult, pending bool) {
	r, end := s.AppendRecords(ctx, recs, phys)
	if r.Status != PutOK || !s.waitsForConfirmed() {
		return r, false
	}
	s.marks.confirmed.Notify(end, s.confirmTimeout(), func(err error) { done(s.confirmResult(end, err)) })
	return PutResult{}, true
}

// MaxAppendBytes is the most bytes of records AppendRecords takes at once.
func (s *Store) MaxAppendBytes() int64 { return s.maxBatchBytes() }
