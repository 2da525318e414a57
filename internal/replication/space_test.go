package replication

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestSlaveAdmitsReplicatedWritesAgainstFreeSpace: a slave whose disk
// falls below its reserve (measured free space, as a master's puts are
// admitted) stops taking data cleanly: it writes nothing more, its store
// stays writable-when-space-returns (not failed) and its log a prefix of
// the master's, it leaves the master at once so that the SYNC_MASTER
// refuses sends (IN_SYNC_REPLICAS_NOT_ENOUGH) rather than waiting out the
// replication timeout for each, and it says so in its log, its state and
// the store's disk-full flag (keel_store_writable). When space returns it
// follows again by itself and the logs end byte-identical.
func TestSlaveAdmitsReplicatedWritesAgainstFreeSpace(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 2)
	defer p.stopMaster()
	mem := vfs.NewMem()
	p.slaveFS = mem
	p.slaveCfg = storeConfig(mem)
	p.slaveCfg.Replica = true
	p.slave = openStore(t, p.slaveCfg)
	defer p.slave.Close()
	var logs syncBuffer
	s, err := NewSlave(SlaveConfig{Store: p.slave, FS: mem, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	p.healed(t, "start")

	// The slave's disk: 1 KiB free, well below its reserve.
	total, free, _ := mem.DiskUsage("/data")
	mem.SetCapacity(total - free + 1<<10)
	// The slave sees it at its next measurement (within 100 ms of
	// writing, as a master's puts do): the first send not acknowledged.
	waitUntil(t, "the slave to refuse a range", func() bool { return p.send(t, "filling") != store.PutOK })
	waitUntil(t, "the slave out of the in-sync set", func() bool { return p.m.InSync() == 1 })
	slaveEnd := p.slave.Offset(store.Written)
	got := p.sendFor(t, "full", 1500*time.Millisecond)
	if got[store.PutOK] > 0 || got[store.PutInSyncReplicasNotEnough] == 0 {
		t.Fatalf("slave disk full: %v", got)
	}
	// The master knows: every send is refused at once, none waits out
	// the replication timeout (the slave does not come back while full).
	if got[store.PutFlushSlaveTimeout] > 0 {
		t.Fatalf("%d sends waited out the replication timeout for a full slave: %v", got[store.PutFlushSlaveTimeout], got)
	}
	if w := p.slave.Offset(store.Written); w != slaveEnd {
		t.Fatalf("the full slave wrote %d bytes", w-slaveEnd)
	}
	if err := p.slave.Err(); err != nil {
		t.Fatalf("slave store failed: %v", err)
	}
	if !p.slave.Stats().DiskFull {
		t.Fatal("the slave's store does not say it is full")
	}
	st := s.State()
	if !st.DiskFull || st.Connected || st.RuntimeInfo()["keelReplicationDiskFull"] != "true" {
		t.Fatalf("slave state while full: %+v", st)
	}
	if n := strings.Count(logs.String(), "the disk is full"); n != 1 {
		t.Fatalf("the slave logged its full disk %d times:\n%s", n, logs.String())
	}
	sameLogs(t, p.slave, p.master)

	mem.SetCapacity(vfs.DefaultMemCapacity)
	p.healed(t, "space back")
	if st := s.State(); st.DiskFull || !st.Connected {
		t.Fatalf("slave state after space returned: %+v", st)
	}
	if !strings.Contains(logs.String(), "disk space is back") {
		t.Fatalf("no word of the space returning:\n%s", logs.String())
	}
	select {
	case err := <-stopped:
		t.Fatalf("slave stopped: %v", err)
	default:
	}
}
