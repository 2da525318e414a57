package testcluster

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

func TestStartDefaults(t *testing.T) {
	var wrapped atomic.Int64
	c := Start(t, WithHandler(func(h remoting.Handler) remoting.Handler {
		return remoting.HandlerFunc(func(ctx context.Context, conn *remoting.Conn, req *remoting.Command) *remoting.Command {
			wrapped.Add(1)
			return h.Handle(ctx, conn, req)
		})
	}))
	if c.Scheduler() != nil || c.Transactions() != nil || c.Deduplicator() != nil || c.MemFS() != nil {
		t.Fatal("engines or MemFS present without their options")
	}
	if c.BrokerAddr() != c.AdvertisedAddr() || c.NamesrvAddrs()[0] != c.NamesrvAddr() {
		t.Fatalf("addresses: broker %s advertised %s namesrv %v", c.BrokerAddr(), c.AdvertisedAddr(), c.NamesrvAddrs())
	}
	topic := Uniq("T")
	c.CreateTopic(topic, 2)
	if _, ok := c.Broker().Topic(topic); !ok {
		t.Fatalf("topic %s not on the broker", topic)
	}
	if wrapped.Load() == 0 {
		t.Fatal("the handler wrapper saw no request")
	}
	addr := c.BrokerAddr()
	c.Restart()
	if c.BrokerAddr() != addr {
		t.Fatalf("restart moved the broker from %s to %s", addr, c.BrokerAddr())
	}
	if _, ok := c.Broker().Topic(topic); !ok {
		t.Fatalf("topic %s lost by a clean restart", topic)
	}
}

func TestStartAllEnginesOnMemFSAndKill(t *testing.T) {
	var flush store.FlushDiskType = -1
	c := Start(t, WithMemFS(), WithFlush(store.SyncFlush), WithScheduler([]time.Duration{time.Second}),
		WithTransactions(nil), WithDedup(time.Minute),
		WithStoreConfig(func(cfg *store.Config) { flush = cfg.FlushDiskType }))
	if flush != store.SyncFlush {
		t.Fatalf("store flush type %v, want SyncFlush (options apply in order)", flush)
	}
	if c.Scheduler() == nil || c.Transactions() == nil || c.Deduplicator() == nil {
		t.Fatal("an engine is missing")
	}
	if c.Dir() != MemDir || c.MemFS() == nil || c.FS() != c.MemFS() {
		t.Fatalf("data not on the MemFS at %s: %s", MemDir, c.Dir())
	}
	topic := Uniq("T")
	c.CreateTopic(topic, 1)
	before := c.MemFS()
	c.Kill()
	if c.MemFS() == before || c.FS() != c.MemFS() {
		t.Fatal("Kill did not move to the crash-captured filesystem")
	}
	if _, ok := c.Broker().Topic(topic); !ok {
		t.Fatalf("topic %s lost by kill -9 and power loss", topic)
	}
	if c.Scheduler() == nil || c.Transactions() == nil || c.Deduplicator() == nil {
		t.Fatal("an engine is missing after Kill")
	}
}
