package store

import (
	"context"
	"fmt"

	"github.com/keelmq/keel/internal/store/record"
)

// PutRecord appends one record of an enveloped type (a Kafka batch, an AMQP
// message, a system record; see package record), built with
// record.AppendEnvelope. The store sets its STORETIMESTAMP and
// PHYSICALOFFSET and the queue offset of each destination (dense per
// queue, shared with RocketMQ messages of the same queue), so one record
// gets one ConsumeQueue entry per destination. It returns what PutMessages
// would (waiting for Confirmed under SYNC_FLUSH or replication) and the record's CommitLog
// offset (-1 if not written). rec is not kept.
func (s *Store) PutRecord(ctx context.Context, rec []byte) (PutResult, int64) {
	end, phys, r := s.appendRecord(ctx, rec)
	if r.Status != PutOK {
		return r, -1
	}
	if s.waitsForConfirmed() {
		r = s.waitFlushed(ctx, end)
	}
	return r, phys
}

// PutRecordDeferred is PutRecord without a goroutine parked per record:
// the record is appended before it returns (records put from one
// goroutine are appended in call order) and, when the result is known at
// once (an error, ASYNC_FLUSH without replication), it is returned with pending false and
// done is never called. Otherwise it returns pending true and done is
// called exactly once with what PutRecord would return, from the store's
// acknowledger goroutine (done must not block), possibly before
// PutRecordDeferred returns. phys, returned and passed to done, is the
// record's CommitLog offset (-1 if not written).
func (s *Store) PutRecordDeferred(ctx context.Context, rec []byte, done func(r PutResult, phys int64)) (res PutResult, phys int64, pending bool) {
	end, phys, r := s.appendRecord(ctx, rec)
	if r.Status != PutOK {
		return r, -1, false
	}
	if !s.waitsForConfirmed() {
		return r, phys, false
	}
	s.marks.confirmed.Notify(end, s.confirmTimeout(), func(err error) { done(s.confirmResult(end, err), phys) })
	return PutResult{}, phys, true
}

// appendRecord checks and appends rec; it returns the offset after it
// and its own offset.
func (s *Store) appendRecord(ctx context.Context, rec []byte) (end, phys int64, r PutResult) {
	if err := checkRecord(rec); err != nil {
		return -1, -1, PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: put record: %w", err)}
	}
	if t := recordType(rec); !t.Enveloped() {
		return -1, -1, PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: put record: a %v goes through PutMessages", t)}
	}
	if n := int64(len(rec)); n > s.maxBatchBytes() || n > s.cfg.maxRecordBytes() {
		return -1, -1, PutResult{Status: PutMessageIllegal, Err: fmt.Errorf("store: record of %d bytes exceeds the limit %d", n, min(s.maxBatchBytes(), s.cfg.maxRecordBytes()))}
	}
	req := putReqPool.Get().(*putReq)
	req.buf = append(req.buf[:0], rec...)
	req.recs = append(req.recs[:0], req.buf)
	req.one[0] = nil
	req.msgs = req.one[:]
	req.logical = int64(record.Envelope(rec).Messages())
	s.appending.Add(1)
	end, r = s.putAppend(ctx, req, req.msgs)
	s.appendDone()
	phys, n := req.recPhys, req.logical
	releaseReq(req)
	if r.Status != PutOK {
		return -1, -1, r
	}
	s.stats.puts.Add(1)
	s.stats.putMsgs.Add(n)
	return end, phys, r
}

// patchEnvelope is Append's patch of the enveloped record i of the
// combined batch of reqs: its offset, store time and the queue offsets of
// its destinations. appendMu is held.
func (s *Store) patchEnvelope(reqs []*putReq, i int, rec []byte, phys, now int64) {
	e := record.Envelope(rec)
	e.Patch(phys, now)
	e.EachDest(func(_ int, topic []byte, qid int32, _, _ int64, at int) error {
		e.PatchQueueOffset(at, s.nextQueueOffset(string(topic), qid))
		return nil
	})
	for _, r := range reqs {
		if i < len(r.recs) {
			r.recPhys = phys
			return
		}
		i -= len(r.recs)
	}
}

// returnEnvelopeOffsets gives back the queue offsets an enveloped record
// that was not written took. appendMu is held.
func returnEnvelopeOffsets(s *Store, rec []byte) {
	record.Envelope(rec).EachDest(func(_ int, topic []byte, qid int32, _, _ int64, _ int) error {
		s.counters[string(topic)][qid]--
		return nil
	})
}
