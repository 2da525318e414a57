package replication

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestSlaveWaitsForAndFollowsMasterAddress: a slave configured without a
// master address waits (holding nothing) until it is told one, then
// follows that master; told another (the master moved to another HA
// port), it leaves the old one, still up, and follows the new one.
func TestSlaveWaitsForAndFollowsMasterAddress(t *testing.T) {
	mfs := vfs.NewMem()
	p := startMaster(t, mfs, 1)
	putN(t, p.master, "a", 5)
	fs := vfs.NewMem()
	cfg := storeConfig(fs)
	cfg.Replica = true
	slave := openStore(t, cfg)
	defer slave.Close()
	s, err := NewSlave(SlaveConfig{Store: slave, FS: fs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	time.Sleep(100 * time.Millisecond) // nothing to wait for: it must not have connected anywhere
	if w := slave.Offset(store.Written); w != 0 || s.MasterAddr() != "" {
		t.Fatalf("slave without an address wrote %d, follows %q", w, s.MasterAddr())
	}
	s.SetMasterAddr(p.addr)
	waitUntil(t, "slave caught up", func() bool { return slave.Offset(store.Flushed) == p.master.Offset(store.Written) })

	// Another master of the group's log (a copy of the first one's disk)
	// on another port, the first one still up: the slave must leave it.
	defer p.stopMaster()
	mfs2 := mfs.CrashClone()
	st := openStore(t, p.masterStoreConfig(mfs2))
	m, err := NewMaster(MasterConfig{Store: st, FS: mfs2, DataDir: "/data", BrokerName: "broker-a", Sync: true, MinInSyncReplicas: 1,
		HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Serve(mctx, ln); close(done) }()
	defer func() { mcancel(); <-done; st.Close() }()
	putN(t, st, "b", 5)
	s.SetMasterAddr(ln.Addr().String())
	waitUntil(t, "slave follows the new address", func() bool { return slave.Offset(store.Flushed) == st.Offset(store.Written) })
	if got := s.MasterAddr(); got != ln.Addr().String() {
		t.Fatalf("slave follows %q", got)
	}
	sameLogs(t, slave, st)
}

// TestIdleSlaveStaysInSync: a slave answers heartbeats, so an idle group
// keeps its slave connected and in sync for many idle timeouts (it used
// to be cut and to reconnect every few heartbeats, leaving the in-sync
// set each time).
func TestIdleSlaveStaysInSync(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 2)
	defer p.stopMaster()
	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	defer p.slave.Close()
	waitUntil(t, "slave in sync", func() bool { return p.m.InSync() == 2 })
	putN(t, p.master, "x", 1)
	// 20 heartbeats, more than three idle timeouts (6 heartbeats).
	for deadline := time.Now().Add(20 * 50 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if n := p.m.InSync(); n != 2 {
			t.Fatalf("idle slave left the in-sync set (%d in sync)", n)
		}
	}
}
