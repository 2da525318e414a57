package replication

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker/schedule"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestScheduledDeliveryOnceWhileAcksLate: on a SYNC_MASTER whose slave
// stays in sync but acknowledges late (its acknowledgements are cut, then
// restored), a due delayed message's put answers FLUSH_SLAVE_TIMEOUT. The
// delivery is in the master's log; the schedule engine waits for it to be
// replicated instead of putting it again, never saves its cursor past it
// meanwhile, and the message is delivered exactly once.
func TestScheduledDeliveryOnceWhileAcksLate(t *testing.T) {
	mfs := vfs.NewMem()
	cfg := (*pair)(nil).masterStoreConfig(mfs)
	cfg.ReplicationTimeout = 150 * time.Millisecond
	st := openStore(t, cfg)
	// A long AckTimeout: the slave stays in the in-sync set while its
	// acknowledgements are cut, so the store's put gate lets puts through
	// and they time out waiting for it; a long heartbeat keeps the master
	// from closing the silent link (six heartbeats).
	m, err := NewMaster(MasterConfig{Store: st, FS: mfs, DataDir: "/data", BrokerName: "broker-a", Sync: true,
		MinInSyncReplicas: 2, AckTimeout: time.Minute, HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(context.Background())
	mdone := make(chan struct{})
	go func() { m.Serve(mctx, ln); close(mdone) }()
	defer func() { mcancel(); <-mdone; st.Close() }()
	proxy := newLinkProxy(t, ln.Addr().String())
	sfs := vfs.NewMem()
	scfg := storeConfig(sfs)
	scfg.Replica = true
	slave := openStore(t, scfg)
	s, err := NewSlave(SlaveConfig{Store: slave, FS: sfs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: proxy.addr(), SyncFlush: true, HeartbeatInterval: time.Second, RetryInterval: 20 * time.Millisecond,
		Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	sdone := make(chan error, 1)
	go func() { sdone <- s.Run(sctx) }()
	defer func() { scancel(); <-sdone; slave.Close() }()
	waitUntil(t, "slave in sync", func() bool { return m.InSync() == 2 })

	var mu sync.Mutex
	var logged []int64 // level queue 0 cursors handed to OnCursors
	svc, err := schedule.New(schedule.Config{Dir: "/data", FS: mfs, DelayLevels: []time.Duration{300 * time.Millisecond},
		RetryInterval: 20 * time.Millisecond, OnCursors: func(c map[string]map[int32]int64) error {
			mu.Lock()
			logged = append(logged, c[schedule.LevelTopic][0])
			mu.Unlock()
			return nil
		}}, st)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(ctx) }()
	defer func() { cancel(); <-ran; svc.Close() }()
	st.OnVisible(svc.OnDispatch)

	if r := svc.Schedule(context.Background(), msg("T", "later"), 1, 0); !r.OK() {
		t.Fatalf("schedule: %v %v", r.Status, r.Err)
	}
	scheduled := st.Offset(store.Written)
	proxy.cutAcks.Store(true)
	waitUntil(t, "the delivery written", func() bool { return st.Offset(store.Written) > scheduled })
	delivered := st.Offset(store.Written)
	// Several replication timeouts with retries every 20 ms: the old
	// engine put the delivery again after each.
	time.Sleep(8 * cfg.ReplicationTimeout)
	if got := st.Offset(store.Written); got != delivered {
		t.Fatalf("the master wrote %d more bytes while the slave's acks were cut (a second delivery)", got-delivered)
	}
	if m.InSync() != 2 {
		t.Fatalf("the slave left the in-sync set (%d); the test needs it in", m.InSync())
	}
	if c := svc.Progress()[schedule.LevelTopic][0]; c != 0 {
		t.Fatalf("cursor saved at %d past an unreplicated delivery", c)
	}
	mu.Lock()
	for _, c := range logged {
		if c != 0 {
			t.Errorf("delay progress %d logged past an unreplicated delivery", c)
		}
	}
	mu.Unlock()

	proxy.heal()
	waitUntil(t, "the cursor past the replicated delivery", func() bool {
		return svc.Progress()[schedule.LevelTopic][0] == 1
	})
	if r := st.Offset(store.Replicated); r < delivered {
		t.Fatalf("cursor saved with replicated %d below the delivery's end %d", r, delivered)
	}
	if n := st.MaxOffset("T", 0); n != 1 {
		t.Fatalf("%d deliveries of one delayed message", n)
	}
	waitUntil(t, "the slave holds the delivery", func() bool { return slave.MaxOffset("T", 0) == 1 })
	if n := slave.MaxOffset("T", 0); n != 1 {
		t.Fatalf("the slave holds %d deliveries", n)
	}
}
