package testcluster

import (
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/broker/dedup"
	"github.com/keelmq/keel/internal/broker/schedule"
	"github.com/keelmq/keel/internal/broker/transaction"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// NamesrvAddr is the NameServer's address.
func (c *Cluster) NamesrvAddr() string { return c.nsAddr }

// NamesrvAddrs is the NameServer address list clients take
// (primitive.NamesrvAddr(c.NamesrvAddrs()) for the official client).
func (c *Cluster) NamesrvAddrs() []string { return []string{c.nsAddr} }

// BrokerAddr is the broker's listener address (stable across Restart and
// Kill).
func (c *Cluster) BrokerAddr() string { return c.brAddr }

// AdvertisedAddr is the address the broker registers (see WithAdvertise).
func (c *Cluster) AdvertisedAddr() string { return c.advAddr }

// Dir is the data directory (on FS).
func (c *Cluster) Dir() string { return c.dir }

// FS is the filesystem of the data (after Kill, the crash-captured one).
func (c *Cluster) FS() vfs.FS { return c.fs }

// MemFS is the in-memory filesystem of WithMemFS (after Kill, the
// crash-captured one), nil on the real filesystem.
func (c *Cluster) MemFS() *vfs.MemFS { return c.o.mem }

// Store is the running broker's store.
func (c *Cluster) Store() *store.Store { return c.running().st }

// Broker is the running broker.
func (c *Cluster) Broker() *broker.Broker { return c.running().br }

// Scheduler is the running scheduled-delivery service (WithScheduler), or
// nil.
func (c *Cluster) Scheduler() *schedule.Service { return c.running().svc }

// Transactions is the running transaction engine (WithTransactions), or
// nil.
func (c *Cluster) Transactions() *transaction.Engine { return c.running().eng }

// Deduplicator is the running de-duplicator (WithDedup), or nil.
func (c *Cluster) Deduplicator() *dedup.Deduplicator { return c.running().dd }

func (c *Cluster) running() *node {
	if c.node == nil {
		c.tb.Fatal("testcluster: the broker is not running")
	}
	return c.node
}
