package broker

// END_TRANSACTION (37) and Keel's ReqListTransactions (10401), served by
// the installed transaction engine (core.Transactions; see
// internal/core/hooks.go). ProducerConn gives the engine a producer's
// connection for CHECK_TRANSACTION_STATE.
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
	"errors"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// ProducerConn returns a live connection of a producer group (for
// transaction check-back), or nil.
func (b *Broker) ProducerConn(group string) *remoting.Conn { return b.producers.anyConn(group) }

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

// remoting.ReqListTransactions lists the undecided transactional half
// messages: the installed Transactions engine serves it when it has a
// HandleList method (internal/broker/transaction does).
type transactionLister interface {
	HandleList(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command
}

func (b *Broker) handleListTransactions(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	if l, ok := b.core.Transactions().(transactionLister); ok {
		return l.HandleList(ctx, c, req), nil
	}
	return nil, protoErrorf(remoting.ResSystemError, "transactional messages are not enabled on this broker")
}
