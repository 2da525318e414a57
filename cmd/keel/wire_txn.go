package main

import (
	"context"
	"fmt"

	"github.com/keelmq/keel/internal/broker/dedup"
	"github.com/keelmq/keel/internal/broker/transaction"
)

// transactionStarter installs the transaction engine (half messages,
// END_TRANSACTION, check-back; unless rejectTransactionMessage) and the
// producer de-duplicator (unless duplicationWindowSeconds = 0) in the
// core; it must come after the broker's starters. Its stop runs before
// the broker's: it ends the check rounds and saves the cursors; END
// requests still arriving are served (and re-read after the next start).
func (p *parts) transactionStarter() starter {
	return func() (service, error) {
		if p.store == nil || p.core == nil || p.broker == nil {
			return service{}, fmt.Errorf("transactions: the store, the core and the broker must start first")
		}
		if p.cfg.DuplicationWindow > 0 {
			// A master that opens an empty log has nothing older than its
			// table: a new key needs no index lookup in the first window.
			dd, err := dedup.New(dedup.Config{Window: p.cfg.DuplicationWindow, Index: p.store,
				StartsEmpty: p.store.Empty() && !p.store.Replica(), Logger: p.log.With("component", "dedup")})
			if err != nil {
				return service{}, err
			}
			p.core.SetDeduplicator(dd)
		}
		if p.cfg.RejectTransactionMessage {
			p.log.Info("transactional messages rejected (rejectTransactionMessage=true)")
			return service{name: "transactions"}, nil
		}
		eng, err := transaction.New(transaction.Config{
			Store: p.store, Producers: p.broker, StoreHost: p.broker.StoreHost(),
			Dir: p.cfg.StorePathRootDir, CheckInterval: p.cfg.TransactionCheckInterval,
			Timeout: p.cfg.TransactionTimeout, CheckMax: p.cfg.TransactionCheckMax,
			Logger: p.log.With("component", "transactions"),
		})
		if err != nil {
			return service{}, err
		}
		p.core.SetTransactions(eng)
		p.txn = eng
		return service{
			name: "transactions",
			run:  eng.Run,
			stop: func(context.Context) error { return eng.Close() },
		}, nil
	}
}
