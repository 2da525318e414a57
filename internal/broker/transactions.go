package broker

// END_TRANSACTION (37) and Keel's ReqListTransactions (10401): served by
// the installed transaction engine (core.Broker.SetTransactions; see
// internal/core/hooks.go), which must also implement the RocketMQ side,
// End and HandleList. ProducerConn gives the engine a producer's
// connection for CHECK_TRANSACTION_STATE.

import (
	"context"

	"github.com/keelmq/keel/internal/remoting"
)

// ProducerConn returns a live connection of a producer group (for
// transaction check-back), or nil.
func (b *Broker) ProducerConn(group string) *remoting.Conn { return b.producers.anyConn(group) }

// transactionEnder is the RocketMQ part of a Transactions engine.
type transactionEnder interface {
	// End serves END_TRANSACTION (37); a nil response sends nothing.
	End(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command
}

func (b *Broker) handleEndTransaction(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	t, ok := b.core.Transactions().(transactionEnder) // always, when installed through SetTransactions
	if !ok {
		return nil, protoErrorf(remoting.ResSystemError, "transactional messages are not enabled on this broker")
	}
	return t.End(ctx, c, req), nil
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
