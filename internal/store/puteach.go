package store

import (
	"context"

	"github.com/keelmq/keel/internal/message"
)

// DeferredPut is one put of PutEachDeferred: its messages and the
// callback of a pending result (as PutMessagesDeferred's), and, once
// PutEachDeferred returned, what it returned for this put.
type DeferredPut struct {
	Msgs []*message.Message
	Done func(PutResult)

	Result  PutResult // the result known at once (Pending false)
	Pending bool      // Done gets the result
}

// maxEachPuts is the most puts PutEachDeferred queues with one append
// (more are taken in runs of this many).
const maxEachPuts = 64

// PutEachDeferred is PutMessagesDeferred for several independent puts
// at once (the single-message sends one connection's read burst brought):
// each put is all or none by itself and gets exactly the result its own
// PutMessagesDeferred call would have given (a put its checks refuse, say
// a body over MaxMessageBytes, fails alone; a failed write fails every put
// it carried, as it does puts that concurrent callers' writes combined),
// set in its Result and Pending, or given to its Done, which is called at
// most once and never for a put not pending. The puts that pass their
// checks are queued together, in order, and written with one CommitLog
// append (appendCombined's limits allowing): one write instead of one per
// put, and queue offsets in the order of puts.
func (s *Store) PutEachDeferred(ctx context.Context, puts []DeferredPut) {
	for len(puts) > maxEachPuts {
		s.putEachDeferred(ctx, puts[:maxEachPuts])
		puts = puts[maxEachPuts:]
	}
	if len(puts) == 1 {
		p := &puts[0]
		p.Result, p.Pending = s.PutMessagesDeferred(ctx, p.Msgs, p.Done)
		return
	}
	if len(puts) > 0 {
		s.putEachDeferred(ctx, puts)
	}
}

// putEachDeferred is PutEachDeferred for at most maxEachPuts puts.
func (s *Store) putEachDeferred(ctx context.Context, puts []DeferredPut) {
	var reqArr, queuedArr [maxEachPuts]*putReq
	reqs, queued := reqArr[:len(puts)], queuedArr[:0]
	for i := range puts {
		puts[i].Result, puts[i].Pending = PutResult{}, false
		s.appending.Add(1)
		req := putReqPool.Get().(*putReq)
		if r := s.preparePut(ctx, req, puts[i].Msgs); r.Status != PutOK {
			s.appendDone()
			releaseReq(req)
			puts[i].Result = r
			continue
		}
		reqs[i] = req
		queued = append(queued, req)
	}
	if len(queued) > 0 {
		s.appendQueued(queued...)
		for range queued {
			s.appendDone()
		}
	}
	for i, req := range reqs {
		if req == nil {
			continue
		}
		p := &puts[i]
		end, err := req.end, req.err
		n := req.logical
		releaseReq(req)
		if err != nil {
			p.Result = s.putFailure(err)
			continue
		}
		s.notePut()
		s.stats.putMsgs.Add(n)
		if !s.waitsForConfirmed() || ackAtWrite(p.Msgs) {
			p.Result = PutResult{Status: PutOK}
			continue
		}
		p.Pending = true
		done := p.Done
		s.marks.confirmed.Notify(end, s.confirmTimeout(), func(err error) { done(s.confirmResult(end, err)) })
	}
}
