package broker

// END_TRANSACTION (37) and Keel's ReqListTransactions (10401), served by
// the installed transaction engine (core.Transactions; see
// internal/core/hooks.go), and the engine's check-backs
// (CheckTransaction: CHECK_TRANSACTION_STATE, 39, oneway, to the producer
// of the group seen last).
//
// END_TRANSACTION: commitOrRollback 0 (UNKNOWN) gets no response, as in
// RocketMQ; 8 commits and 12 rolls back the half message named by
// commitLogOffset and tranStateTableOffset of producerGroup; anything else,
// or a header that does not parse, is SYSTEM_ERROR. The engine's answer is
// the put status of the write that recorded the decision, answered with
// its response code (errors.go), or a core error (SYSTEM_ERROR with its
// message).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// ProducerConn returns a live connection of a producer group (for
// transaction check-back), or nil.
func (b *Broker) ProducerConn(group string) *remoting.Conn {
	c, _ := b.core.Producers().AnyConn(group).(*remoting.Conn)
	if c == nil {
		return nil
	}
	select {
	case <-c.Done(): // closed; the connection's close has not unregistered it yet
		return nil
	default:
		return c
	}
}

// HasProducer reports whether a producer group has a live connection
// (transaction.Producers).
func (b *Broker) HasProducer(group string) bool { return b.ProducerConn(group) != nil }

// CheckTransaction sends CHECK_TRANSACTION_STATE (oneway) to a live
// producer of group (transaction.Producers): the body is the half message
// as stored, the header names its offsets, ids and the broker.
func (b *Broker) CheckTransaction(group string, chk core.TransactionCheck) error {
	conn := b.ProducerConn(group)
	if conn == nil {
		return fmt.Errorf("broker: no live producer of group %s", group)
	}
	h := chk.Half
	body, err := h.AppendStored(nil)
	if err != nil {
		return err
	}
	uniq, _ := message.Property(h.Properties, message.PropUniqKey)
	if uniq == "" {
		uniq = chk.ID
	}
	req := remoting.NewRequest(remoting.ReqCheckTransactionState, map[string]string{
		"tranStateTableOffset": itoa(h.QueueOffset),
		"commitLogOffset":      itoa(h.PhysOffset),
		"msgId":                uniq,
		"transactionId":        chk.ID,
		"offsetMsgId":          message.OffsetMsgID(b.storeHost, h.PhysOffset),
		"topic":                h.Topic,
		"bname":                b.cfg.BrokerName,
	}, body)
	return conn.InvokeOneway(req)
}

// END_TRANSACTION commitOrRollback values (the message sysFlag bits).
const (
	decisionNone     = 0
	decisionCommit   = message.FlagTxCommit
	decisionRollback = message.FlagTxRollback
)

func (b *Broker) handleEndTransaction(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	t := b.core.Transactions()
	if t == nil {
		return nil, protoErrorf(remoting.ResSystemError, "transactional messages are not enabled on this broker")
	}
	decision, err := req.ExtInt32("commitOrRollback")
	if err != nil {
		return nil, protoErrorf(remoting.ResSystemError, "bad commitOrRollback: %v", err)
	}
	if decision == decisionNone {
		return nil, nil
	}
	if decision != decisionCommit && decision != decisionRollback {
		return nil, protoErrorf(remoting.ResSystemError, "illegal commitOrRollback %d", decision)
	}
	phys, err1 := req.ExtInt64("commitLogOffset")
	qoff, err2 := req.ExtInt64("tranStateTableOffset")
	if err := errors.Join(err1, err2); err != nil {
		return nil, protoErrorf(remoting.ResSystemError, "bad END_TRANSACTION header: %v", err)
	}
	status, remark, err := t.End(ctx, core.EndTransaction{ProducerGroup: req.Ext("producerGroup"),
		CommitLogOffset: phys, QueueOffset: qoff, Commit: decision == decisionCommit})
	if err != nil {
		return nil, err
	}
	return req.NewResponse(putStatusCode(status), remark), nil
}

// handleListTransactions serves remoting.ReqListTransactions when the
// installed engine is a core.TransactionLister. Request ext: "topic" and
// "producerGroup" (optional filters), "limit" (optional, default 1000).
// Response body: JSON, core.PendingTransactions.
func (b *Broker) handleListTransactions(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	l, ok := b.core.Transactions().(core.TransactionLister)
	if !ok {
		return nil, protoErrorf(remoting.ResSystemError, "transactional messages are not enabled on this broker")
	}
	limit := 1000
	if req.Ext("limit") != "" {
		n, err := req.ExtInt32("limit")
		if err != nil || n < 0 {
			return req.NewResponse(remoting.ResSystemError, "bad limit"), nil
		}
		limit = int(n)
	}
	body, err := json.Marshal(l.List(req.Ext("topic"), req.Ext("producerGroup"), limit))
	if err != nil {
		return req.NewResponse(remoting.ResSystemError, err.Error()), nil
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}
