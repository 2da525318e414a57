package transaction

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// Run performs check rounds every CheckInterval (the first one after one
// interval) and persists the cursors after each, until ctx is done or
// Close is called. It uses one timer; it never polls.
func (e *Engine) Run(ctx context.Context) error {
	e.runMu.Lock()
	if e.stopping {
		e.runMu.Unlock()
		return nil
	}
	e.wg.Add(1)
	e.runMu.Unlock()
	defer e.wg.Done()
	t := time.NewTimer(e.cfg.CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.closed:
			return nil
		case <-t.C:
		case <-e.wake:
			if !t.Stop() {
				<-t.C
			}
		}
		rctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-e.closed:
				cancel()
			case <-rctx.Done():
			}
		}()
		e.CheckOnce(rctx)
		cancel()
		t.Reset(e.cfg.CheckInterval)
	}
}

// Trigger makes Run start a check round now (tests, operators).
func (e *Engine) Trigger() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// RoundResult summarises one check round.
type RoundResult struct {
	Due, Checked, Discarded, NoProducer, Failed int
}

// CheckOnce runs one check round: it catches up with the queues, then for
// every undecided transaction whose newest half is older than the timeout
// (the first check also waits CHECK_IMMUNITY_TIME_IN_SECONDS) either
// discards it (check count at CheckMax) or re-puts its half with the count
// incremented and sends CHECK_TRANSACTION_STATE to a live producer of its
// group. Finally it persists the cursors. Safe to call concurrently with
// END_TRANSACTION; rounds must not overlap (Run serialises them).
func (e *Engine) CheckOnce(ctx context.Context) RoundResult {
	var rr RoundResult
	e.roundMu.Lock()
	defer e.roundMu.Unlock()
	if err := e.catchUpOps(); err != nil {
		e.log.Error("transaction op queue catch-up failed", "err", err)
	}
	if err := e.catchUpHalves(); err != nil {
		e.log.Error("transaction half queue catch-up failed", "err", err)
	}
	due := e.dueTxns()
	rr.Due = len(due)
	var mu sync.Mutex
	sem := make(chan struct{}, e.cfg.CheckWorkers)
	var wg sync.WaitGroup
	for _, id := range due {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out := e.checkTxn(ctx, id)
			mu.Lock()
			switch out {
			case outChecked:
				rr.Checked++
			case outDiscarded:
				rr.Discarded++
			case outNoProducer:
				rr.NoProducer++
			case outFailed:
				rr.Failed++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := e.persist(); err != nil {
		e.log.Error("transaction cursor write failed", "err", err)
	}
	return rr
}

// dueTxns lists the transactions due for a check now.
func (e *Engine) dueTxns() []string {
	now := e.cfg.Now().UnixMilli()
	timeout := e.cfg.Timeout.Milliseconds()
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for id, t := range e.txns {
		if len(t.halves) == 0 {
			continue
		}
		h := t.newest()
		wait := timeout
		if h.checks == 0 {
			wait = max(wait, h.immunity)
		}
		if now-h.storeTs >= wait {
			ids = append(ids, id)
		}
	}
	return ids
}

type checkOutcome int

const (
	outSkipped checkOutcome = iota
	outChecked
	outDiscarded
	outNoProducer
	outFailed
)

func (e *Engine) checkTxn(ctx context.Context, id string) checkOutcome {
	t := e.tryLockTxn(id)
	if t == nil {
		return outSkipped // decided, or an END is working on it
	}
	defer e.unlockTxn(t)
	live := e.liveHalves(t)
	if len(live) == 0 {
		return outSkipped
	}
	src := live[len(live)-1]
	checks := src.checks
	for _, h := range live {
		checks = max(checks, h.checks)
	}
	rec, err := e.lookHalf(ctx, src.phys)
	if err != nil {
		if src.offset < e.st.MinOffset(HalfTopic, 0) { // retention removed it (fileReservedTime)
			e.log.Warn("transaction half message removed by retention before a decision; discarded",
				"transactionId", id, "topic", src.topic, "producerGroup", src.group, "halfOffset", src.offset)
			if res := e.writeOp(ctx, id, OpDiscard, live); res.Status == store.PutOK {
				e.discarded.Add(1)
				return outDiscarded
			}
			return outFailed
		}
		e.log.Error("transaction half message unreadable; check skipped", "transactionId", id,
			"commitLogOffset", src.phys, "err", err)
		return outFailed
	}
	m, err := message.Decode(rec)
	if err != nil {
		e.log.Error("transaction half message undecodable; check skipped", "transactionId", id, "err", err)
		return outFailed
	}
	if int(checks) >= e.cfg.CheckMax {
		return e.discard(ctx, t, live, m, checks)
	}
	if !e.cfg.Producers.HasProducer(src.group) {
		e.noProducer.Add(1)
		return outNoProducer
	}
	nh, ok := e.reput(ctx, t, m, checks+1)
	if !ok {
		return outFailed
	}
	if res := e.writeOp(ctx, id, OpRecheck, live); res.Status != store.PutOK {
		e.log.Warn("transaction recheck record not written; the old half stays undecided", "transactionId", id,
			"status", res.Status.String(), "err", res.Err)
	}
	if err := e.sendCheck(src.group, m, nh, id); err != nil {
		e.log.Info("CHECK_TRANSACTION_STATE not sent; retried next round", "transactionId", id, "err", err)
		return outFailed
	}
	e.checks.Add(1)
	return outChecked
}

// reput stores a copy of the half message m with TRANSACTION_CHECK_TIMES =
// checks in the half queue and registers it as t's newest half.
func (e *Engine) reput(ctx context.Context, t *txn, m *message.Message, checks int32) (*half, bool) {
	c := *m
	c.Properties = message.SetProperty(m.Properties, message.PropTransactionCheckTimes, strconv.Itoa(int(checks)))
	c.Topic, c.QueueID = HalfTopic, 0
	res := e.st.PutMessage(ctx, &c)
	if !written(res.Status) {
		e.log.Warn("transaction half re-put failed; retried next round", "transactionId", t.id,
			"status", res.Status.String(), "err", res.Err)
		return nil, false
	}
	old := t.newest()
	nh := &half{offset: c.QueueOffset, phys: c.PhysOffset, storeTs: c.StoreTimestamp, topic: old.topic,
		queueID: old.queueID, group: old.group, checks: checks, immunity: old.immunity}
	e.mu.Lock()
	e.addHalfLocked(nh, t.id, false)
	e.mu.Unlock()
	return nh, true
}

// sendCheck asks a producer of group about transaction id: the question
// carries the re-put half nh as the half message m with topic REAL_TOPIC,
// queue REAL_QID and nh's offsets.
func (e *Engine) sendCheck(group string, m *message.Message, nh *half, id string) error {
	b := *m
	b.Topic, b.QueueID = nh.topic, nh.queueID
	b.QueueOffset, b.PhysOffset, b.StoreTimestamp = nh.offset, nh.phys, nh.storeTs
	b.Properties = message.SetProperty(m.Properties, message.PropTransactionCheckTimes, strconv.Itoa(int(nh.checks)))
	return e.cfg.Producers.CheckTransaction(group, core.TransactionCheck{Half: &b, ID: id})
}

// discard gives up on a transaction that reached the check limit: a copy
// of its half goes to TRANS_CHECK_MAX_TIME_TOPIC queue 0 (where operators
// find it), then an op record decides its halves.
func (e *Engine) discard(ctx context.Context, t *txn, live []*half, m *message.Message, checks int32) checkOutcome {
	c := *m
	c.Topic, c.QueueID = CheckMaxTopic, 0
	res := e.st.PutMessage(ctx, &c)
	if !written(res.Status) {
		e.log.Error("transaction discard copy failed; retried next round", "transactionId", t.id,
			"status", res.Status.String(), "err", res.Err)
		return outFailed
	}
	if res := e.writeOp(ctx, t.id, OpDiscard, live); res.Status != store.PutOK {
		e.log.Error("transaction discard record failed; retried next round", "transactionId", t.id,
			"status", res.Status.String(), "err", res.Err)
		return outFailed
	}
	e.discarded.Add(1)
	src := live[len(live)-1]
	e.log.Warn("transaction discarded after the check limit; kept in "+CheckMaxTopic, "transactionId", t.id,
		"topic", src.topic, "producerGroup", src.group, "checks", checks,
		"checkMaxOffset", c.QueueOffset, "commitLogOffset", c.PhysOffset)
	return outDiscarded
}

// Close stops Run, waits for it and writes the cursor file (when the op
// records it relies on are durable). It is idempotent. The store must
// still be open.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		e.runMu.Lock()
		e.stopping = true
		close(e.closed)
		e.runMu.Unlock()
		e.wg.Wait()
		e.roundMu.Lock()
		defer e.roundMu.Unlock()
		if cerr := e.catchUpOps(); cerr != nil {
			err = cerr
		}
		if cerr := e.catchUpHalves(); cerr != nil && err == nil {
			err = cerr
		}
		if perr := e.persist(); perr != nil && err == nil {
			err = perr
		}
	})
	return err
}
