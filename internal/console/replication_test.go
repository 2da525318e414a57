package console

import (
	"context"
	"maps"
	"net"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
)

// withReplication makes the broker's runtime info carry the replication
// state of the master m holds, once set (as keel broker's wiring does).
func withReplication(m *atomic.Pointer[replication.Master]) func(*broker.Config) {
	return func(b *broker.Config) {
		prev := b.RuntimeInfo
		b.RuntimeInfo = func() map[string]string {
			info := prev()
			if info == nil {
				info = map[string]string{}
			}
			if mm := m.Load(); mm != nil {
				maps.Copy(info, mm.State(time.Now()).RuntimeInfo())
			}
			return info
		}
	}
}

// startReplication makes the cluster's broker an ASYNC_MASTER with a
// slave (a store of its own, not registered with the NameServer) that
// follows it, and waits until the slave holds the whole log.
func (c *cluster) startReplication(into *atomic.Pointer[replication.Master]) {
	t := c.t
	t.Helper()
	m, err := replication.NewMaster(replication.MasterConfig{Store: c.st, DataDir: c.dir, BrokerName: "broker-a",
		HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { m.Serve(ctx, ln); close(served) }()
	dir := t.TempDir()
	scfg := store.DefaultConfig(dir)
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.ConsumeQueueSegmentEntries = 1000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 1000, 4000
	scfg.Replica = true
	sst, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := replication.NewSlave(replication.SlaveConfig{Store: sst, DataDir: dir, BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: ln.Addr().String(), HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-served; <-stopped; sst.Close() })
	into.Store(m)
	waitFor(t, "the slave to hold the log", func() bool {
		st := m.State(time.Now())
		return len(st.Replicas) == 1 && st.Replicas[0].InSync && st.Replicas[0].Acked == c.st.Offset(store.Written) &&
			!st.Replicas[0].LastAck.IsZero()
	})
}
