package transaction

import (
	"context"
	"fmt"
	"math"
	"strconv"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

// End records a producer's decision of the transaction whose half message
// is at d.CommitLogOffset (END_TRANSACTION: the RocketMQ adapter parses
// the request and answers with status's response code and remark). It
// returns the put status of the write that recorded the decision (PutOK
// when the transaction was decided before), or a core.ErrInternal error
// when d does not name a half message of its producer group or the half
// cannot be read.
func (e *Engine) End(ctx context.Context, d core.EndTransaction) (status store.PutStatus, remark string, err error) {
	phys, qoff, group := d.CommitLogOffset, d.QueueOffset, d.ProducerGroup
	rec, err := e.lookHalf(ctx, phys)
	if err != nil {
		return 0, "", core.Errorf(core.ErrInternal, "Find prepared transaction message failed: %v", err)
	}
	v := message.View(rec)
	if string(v.Topic()) != HalfTopic {
		return 0, "", core.Errorf(core.ErrInternal, "the message at commitLogOffset %d is not a prepared transaction message", phys)
	}
	if pg, _ := v.Property(message.PropProducerGroup); string(pg) != group {
		return 0, "", core.Errorf(core.ErrInternal, "the producer group %q differs from the prepared message's %q", group, pg)
	}
	if v.QueueOffset() != qoff {
		return 0, "", core.Errorf(core.ErrInternal, "tranStateTableOffset %d differs from the prepared message's %d", qoff, v.QueueOffset())
	}
	hf, id, err := halfFromRecord(v)
	if err != nil {
		return 0, "", core.Errorf(core.ErrInternal, "%s", err.Error())
	}
	e.mu.Lock()
	e.addHalfLocked(hf, id, true) // no-op unless this half was never registered
	e.mu.Unlock()
	t, err := e.lockTxn(ctx, id)
	if err != nil {
		return 0, "", core.Errorf(core.ErrInternal, "%s", err.Error())
	}
	if t == nil {
		e.dupEnds.Add(1)
		return store.PutOK, "", nil
	}
	defer e.unlockTxn(t)
	if !d.Commit {
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

func (e *Engine) rollback(ctx context.Context, t *txn) (store.PutStatus, string, error) {
	live := e.liveHalves(t)
	if len(live) == 0 {
		e.dupEnds.Add(1)
		return store.PutOK, "", nil
	}
	res := e.writeOp(ctx, t.id, OpRollback, live)
	if res.Status != store.PutOK {
		return res.Status, "write the rollback record: " + res.Status.String() + errText(res.Err), nil
	}
	e.rolledBack.Add(1)
	return store.PutOK, "", nil
}

// commit puts the final message, then the op record (see the package doc
// for why this order and the unverified check make it exactly-once).
func (e *Engine) commit(ctx context.Context, t *txn) (store.PutStatus, string, error) {
	live := e.liveHalves(t)
	if len(live) == 0 { // decided meanwhile by an op record read back from the queue
		e.dupEnds.Add(1)
		return store.PutOK, "", nil
	}
	src := live[len(live)-1]
	rec, err := e.lookHalf(ctx, src.phys)
	if err != nil {
		return 0, "", core.Errorf(core.ErrInternal, "read the prepared message: %v", err)
	}
	m, err := message.Decode(rec)
	if err != nil {
		return 0, "", core.Errorf(core.ErrInternal, "decode the prepared message: %v", err)
	}
	final, err := finalMessage(m)
	if err != nil {
		return 0, "", core.Errorf(core.ErrInternal, "%s", err.Error())
	}
	if t.unverified {
		done, err := e.committedBefore(final.Topic, t.id)
		if err != nil {
			return 0, "", core.Errorf(core.ErrInternal, "look for an earlier commit: %v", err)
		}
		if done {
			e.alreadyDone.Add(1)
			return e.finishCommit(ctx, t, live, store.PutOK)
		}
	}
	res := e.st.PutMessage(ctx, final)
	if !written(res.Status) {
		e.markUnverified(t) // the record may have been written anyway
		return res.Status, "put the committed message: " + res.Status.String() + errText(res.Err), nil
	}
	e.committed.Add(1)
	return e.finishCommit(ctx, t, live, res.Status)
}

// finishCommit writes the commit record; status is the final message's
// put status (PutOK, or a timeout of a record that is written).
func (e *Engine) finishCommit(ctx context.Context, t *txn, live []*half, status store.PutStatus) (store.PutStatus, string, error) {
	res := e.writeOp(ctx, t.id, OpCommit, live)
	if res.Status != store.PutOK {
		e.markUnverified(t)
		if written(res.Status) { // the record is in the log, not yet confirmed
			return res.Status, "", nil
		}
		return res.Status, "committed, but writing the commit record failed: " + res.Status.String() + errText(res.Err), nil
	}
	return status, "", nil
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

func errText(err error) string {
	if err == nil {
		return ""
	}
	return ": " + err.Error()
}
