package transaction

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// END_TRANSACTION commitOrRollback values.
const (
	decisionNone     = 0
	decisionCommit   = 8
	decisionRollback = 12
)

// End serves END_TRANSACTION (37). A nil response sends nothing (the
// "unknown" answer, commitOrRollback = 0, as RocketMQ does).
func (e *Engine) End(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	code, remark := e.end(ctx, req)
	if code < 0 {
		return nil
	}
	return req.NewResponse(code, remark)
}

func (e *Engine) end(ctx context.Context, req *remoting.Command) (int16, string) {
	decision, err := req.ExtInt32("commitOrRollback")
	if err != nil {
		return remoting.ResSystemError, "bad commitOrRollback: " + err.Error()
	}
	if decision == decisionNone {
		return -1, ""
	}
	if decision != decisionCommit && decision != decisionRollback {
		return remoting.ResSystemError, fmt.Sprintf("illegal commitOrRollback %d", decision)
	}
	phys, err1 := req.ExtInt64("commitLogOffset")
	qoff, err2 := req.ExtInt64("tranStateTableOffset")
	if err := errors.Join(err1, err2); err != nil {
		return remoting.ResSystemError, "bad END_TRANSACTION header: " + err.Error()
	}
	rec, err := e.lookHalf(ctx, phys)
	if err != nil {
		return remoting.ResSystemError, "Find prepared transaction message failed: " + err.Error()
	}
	v := message.View(rec)
	group := req.Ext("producerGroup")
	if string(v.Topic()) != HalfTopic {
		return remoting.ResSystemError, fmt.Sprintf("the message at commitLogOffset %d is not a prepared transaction message", phys)
	}
	if pg, _ := v.Property(message.PropProducerGroup); string(pg) != group {
		return remoting.ResSystemError, fmt.Sprintf("the producer group %q differs from the prepared message's %q", group, pg)
	}
	if v.QueueOffset() != qoff {
		return remoting.ResSystemError, fmt.Sprintf("tranStateTableOffset %d differs from the prepared message's %d", qoff, v.QueueOffset())
	}
	hf, id, err := halfFromRecord(v)
	if err != nil {
		return remoting.ResSystemError, err.Error()
	}
	e.mu.Lock()
	e.addHalfLocked(hf, id, true) // no-op unless this half was never registered
	e.mu.Unlock()
	t, err := e.lockTxn(ctx, id)
	if err != nil {
		return remoting.ResSystemError, err.Error()
	}
	if t == nil {
		e.dupEnds.Add(1)
		return remoting.ResSuccess, ""
	}
	defer e.unlockTxn(t)
	if decision == decisionRollback {
		return e.rollback(ctx, t)
	}
	return e.commit(ctx, t)
}

// lookHalf reads the record at phys, waiting up to VisibleWait while it is
// written but not yet confirmed (readable by offset): the producer's END
// can overtake the flush that acknowledged the prepared send (WAIT=false,
// or a put that timed out waiting for it).
func (e *Engine) lookHalf(ctx context.Context, phys int64) ([]byte, error) {
	rec, err := e.st.LookMessageByOffset(phys)
	if err == nil || phys < e.st.Offset(store.Confirmed) || phys >= e.st.Offset(store.Written) {
		return rec, err
	}
	if werr := e.st.WaitFor(ctx, store.Confirmed, phys+1, e.cfg.VisibleWait); werr != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return e.st.LookMessageByOffset(phys)
}

func (e *Engine) rollback(ctx context.Context, t *txn) (int16, string) {
	live := e.liveHalves(t)
	if len(live) == 0 {
		e.dupEnds.Add(1)
		return remoting.ResSuccess, ""
	}
	res := e.writeOp(ctx, t.id, OpRollback, live)
	if code := putCode(res.Status); code != remoting.ResSuccess {
		return code, "write the rollback record: " + res.Status.String() + errText(res.Err)
	}
	e.rolledBack.Add(1)
	return remoting.ResSuccess, ""
}

// commit puts the final message, then the op record (see the package doc
// for why this order and the unverified check make it exactly-once).
func (e *Engine) commit(ctx context.Context, t *txn) (int16, string) {
	live := e.liveHalves(t)
	if len(live) == 0 { // decided meanwhile by an op record read back from the queue
		e.dupEnds.Add(1)
		return remoting.ResSuccess, ""
	}
	src := live[len(live)-1]
	rec, err := e.lookHalf(ctx, src.phys)
	if err != nil {
		return remoting.ResSystemError, "read the prepared message: " + err.Error()
	}
	m, err := message.Decode(rec)
	if err != nil {
		return remoting.ResSystemError, "decode the prepared message: " + err.Error()
	}
	final, err := finalMessage(m)
	if err != nil {
		return remoting.ResSystemError, err.Error()
	}
	if t.unverified {
		done, err := e.committedBefore(final.Topic, t.id)
		if err != nil {
			return remoting.ResSystemError, "look for an earlier commit: " + err.Error()
		}
		if done {
			e.alreadyDone.Add(1)
			return e.finishCommit(ctx, t, live, remoting.ResSuccess)
		}
	}
	res := e.st.PutMessage(ctx, final)
	code := putCode(res.Status)
	if code != remoting.ResSuccess && code != remoting.ResFlushDiskTimeout {
		e.markUnverified(t) // the record may have been written anyway
		return code, "put the committed message: " + res.Status.String() + errText(res.Err)
	}
	e.committed.Add(1)
	return e.finishCommit(ctx, t, live, code)
}

func (e *Engine) finishCommit(ctx context.Context, t *txn, live []*half, code int16) (int16, string) {
	res := e.writeOp(ctx, t.id, OpCommit, live)
	if oc := putCode(res.Status); oc != remoting.ResSuccess {
		e.markUnverified(t)
		if oc == remoting.ResFlushDiskTimeout {
			return oc, ""
		}
		return oc, "committed, but writing the commit record failed: " + res.Status.String() + errText(res.Err)
	}
	return code, ""
}

func (e *Engine) markUnverified(t *txn) {
	e.mu.Lock()
	t.unverified = true
	e.mu.Unlock()
}

// committedBefore reports whether topic holds a committed transaction
// message of transaction id (found through the key index by UNIQ_KEY).
func (e *Engine) committedBefore(topic, id string) (bool, error) {
	offs, err := e.st.QueryByKey(topic, id, 64, 0, math.MaxInt64)
	if err != nil {
		return false, err
	}
	for _, off := range offs {
		rec, err := e.st.LookMessageByOffset(off)
		if err != nil {
			continue // removed by retention meanwhile
		}
		v := message.View(rec)
		if v.SysFlag()&message.FlagTxMask != message.FlagTxCommit {
			continue
		}
		if u, _ := v.Property(message.PropUniqKey); string(u) == id {
			return true, nil
		}
	}
	return false, nil
}

// finalMessage builds the committed message from a half message: its real
// topic and queue, the half's body, flag, born data and reconsume times,
// its properties without REAL_TOPIC, REAL_QID and TRAN_MSG, sysFlag with
// the COMMIT bits and PREPARED_TX_OFFSET = the half's CommitLog offset.
func finalMessage(h *message.Message) (*message.Message, error) {
	topic, _ := message.Property(h.Properties, message.PropRealTopic)
	qs, _ := message.Property(h.Properties, message.PropRealQueueID)
	qid, err := strconv.ParseInt(qs, 10, 32)
	if topic == "" || err != nil || qid < 0 {
		return nil, fmt.Errorf("the prepared message at %d has no usable REAL_TOPIC/REAL_QID", h.PhysOffset)
	}
	props := h.Properties
	for _, k := range []string{message.PropRealTopic, message.PropRealQueueID, message.PropTransactionPrepared} {
		props = message.DeleteProperty(props, k)
	}
	return &message.Message{
		Topic: topic, QueueID: int32(qid), Flag: h.Flag,
		SysFlag:       h.SysFlag&^message.FlagTxMask | message.FlagTxCommit,
		BornTimestamp: h.BornTimestamp, BornHost: h.BornHost, StoreHost: h.StoreHost,
		ReconsumeTimes: h.ReconsumeTimes, PreparedTxOffset: h.PhysOffset,
		Body: h.Body, Properties: props,
	}, nil
}

// putCode maps a put status to a response code (as the broker does).
func putCode(s store.PutStatus) int16 {
	switch s {
	case store.PutOK:
		return remoting.ResSuccess
	case store.PutFlushDiskTimeout:
		return remoting.ResFlushDiskTimeout
	case store.PutMessageIllegal, store.PutPropertiesTooLong:
		return remoting.ResMessageIllegal
	case store.PutServiceNotAvailable, store.PutDiskFull:
		return remoting.ResServiceNotAvailable
	default:
		return remoting.ResSystemError
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}
