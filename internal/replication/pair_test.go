package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

func storeConfig(fs vfs.FS) store.Config {
	cfg := store.DefaultConfig("/data")
	cfg.FS = fs
	cfg.CommitLogSegmentBytes = 64 << 10
	cfg.ConsumeQueueSegmentEntries = 100
	cfg.MaxMessageBytes = 8 << 10
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 64, 1000
	cfg.FlushInterval = 10 * time.Millisecond
	cfg.FlushConsumeQueueInterval = 50 * time.Millisecond
	cfg.RetentionCheckInterval = time.Hour
	cfg.DiskReserveBytes = 0
	cfg.FlushDiskType = store.SyncFlush
	return cfg
}

func openStore(t *testing.T, cfg store.Config) *store.Store {
	t.Helper()
	s, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func msg(topic string, body string) *message.Message {
	return &message.Message{
		Topic: topic, QueueID: 0, Body: []byte(body), BornTimestamp: 1,
		BornHost:  netip.MustParseAddrPort("10.0.0.1:5000"),
		StoreHost: netip.MustParseAddrPort("10.0.0.2:10911"),
	}
}

// waitUntil waits for cond, failing after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

type pair struct {
	master       *store.Store
	m            *Master
	addr         string
	stopMaster   func()
	slaveFS      *vfs.MemFS
	slaveCfg     store.Config
	slave        *store.Store
	s            *Slave
	stopSlave    func()
	slaveStopped chan error
}

// startMaster opens a SYNC_MASTER store and its replication service on a
// loopback port.
func startMaster(t *testing.T, fs vfs.FS, minISR int) *pair {
	st := openStore(t, (*pair)(nil).masterStoreConfig(fs))
	m, err := NewMaster(MasterConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", Sync: true,
		MinInSyncReplicas: minISR, AckTimeout: time.Second, HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Serve(ctx, ln); close(done) }()
	p := &pair{master: st, m: m, addr: ln.Addr().String()}
	p.stopMaster = func() { cancel(); <-done; st.Close() }
	return p
}

// masterStoreConfig is the store configuration of startMaster's master.
func (*pair) masterStoreConfig(fs vfs.FS) store.Config {
	cfg := storeConfig(fs)
	cfg.ExternalReplication = true
	cfg.ReplicationTimeout = 300 * time.Millisecond
	return cfg
}

func (p *pair) startSlave(t *testing.T, fs *vfs.MemFS) {
	p.slaveFS = fs
	p.slaveCfg = storeConfig(fs)
	p.slaveCfg.Replica = true
	p.slave = openStore(t, p.slaveCfg)
	s, err := NewSlave(SlaveConfig{Store: p.slave, FS: fs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond, Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	p.s = s
	ctx, cancel := context.WithCancel(context.Background())
	p.slaveStopped = make(chan error, 1)
	go func() { p.slaveStopped <- s.Run(ctx) }()
	p.stopSlave = func() { cancel(); <-p.slaveStopped }
}

// TestSyncMasterAcksOnlyWhatTheSlaveFlushed: with minInSyncReplicas 2 a
// SYNC_MASTER refuses sends until the slave is in sync; every put it then
// acknowledges is durable on the slave (it survives the slave's power
// loss), the slave serves it from its own ConsumeQueues, and once the
// slave is gone sends are refused (also puts that bypass the broker's
// send check), never PutOK.
func TestSyncMasterAcksOnlyWhatTheSlaveFlushed(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 2)
	defer p.stopMaster()
	if r := p.m.CheckSend(); r.Status != store.PutInSyncReplicasNotEnough {
		t.Fatalf("no slave: CheckSend %v", r.Status)
	}
	p.startSlave(t, vfs.NewMem())
	waitUntil(t, "slave in sync", func() bool { return p.m.InSync() == 2 })
	if r := p.m.CheckSend(); !r.OK() {
		t.Fatalf("slave in sync: CheckSend %v %v", r.Status, r.Err)
	}

	const n = 300 // several 64 KiB segments
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked []int64 // ends of acknowledged puts
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range n / 4 {
				m := msg("T", fmt.Sprintf("w%d-%d-%0400d", w, i, i))
				r := p.master.PutMessage(context.Background(), m)
				if r.Status != store.PutOK {
					t.Errorf("put: %v %v", r.Status, r.Err)
					return
				}
				end := m.PhysOffset + int64(m.StoredSize()) + 4
				if f := p.slave.Offset(store.Flushed); f < end {
					t.Errorf("put acknowledged at %d, slave flushed only %d", end, f)
				}
				mu.Lock()
				acked = append(acked, end)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var maxEnd int64
	for _, e := range acked {
		maxEnd = max(maxEnd, e)
	}
	st := p.m.State(time.Now())
	written, rs := st.LogEnd, st.Replicas
	if len(rs) != 1 || !rs[0].InSync || rs[0].LagBytes != 0 || rs[0].Acked != written || rs[0].BrokerID != 1 {
		t.Fatalf("status after the acknowledged puts: written %d, replicas %+v", written, rs)
	}
	if info := st.RuntimeInfo(); info["keelReplicationInSyncReplicas"] != "2" || info["keelReplicationReplica1LagBytes"] != "0" {
		t.Fatalf("runtime info %v", info)
	}
	if v := p.master.VisibleOffset(); v > p.master.Offset(store.Replicated) {
		t.Fatalf("master visible %d past replicated %d", v, p.master.Offset(store.Replicated))
	}

	// The slave loses power: what it acknowledged is on its disk.
	p.stopSlave()
	waitUntil(t, "slave out of the in-sync set", func() bool { return p.m.InSync() == 1 })
	if r := p.m.CheckSend(); r.Status != store.PutInSyncReplicasNotEnough {
		t.Fatalf("slave gone: CheckSend %v", r.Status)
	}
	// The store refuses every put too (the broker's own writes), at once
	// and writing nothing.
	w := p.master.Offset(store.Written)
	if r := p.master.PutMessage(context.Background(), msg("T", "unreplicated")); r.Status != store.PutInSyncReplicasNotEnough {
		t.Fatalf("put with the slave gone: %v %v", r.Status, r.Err)
	}
	if got := p.master.Offset(store.Written); got != w {
		t.Fatalf("a refused put wrote: %d, was %d", got, w)
	}
	p.slaveFS.Crash()
	p.slave.Close()
	p.slave = openStore(t, p.slaveCfg)
	if w := p.slave.Offset(store.Written); w < maxEnd {
		t.Fatalf("after power loss the slave holds %d bytes, %d were acknowledged", w, maxEnd)
	}
	// It shows no more than it showed before (what its files say it
	// dispatched): the rest waits for the master's word.
	if v := p.slave.VisibleOffset(); v > maxEnd {
		t.Fatalf("slave shows %d after power loss, the master confirmed %d", v, maxEnd)
	}
	p.slave.Close()

	// It comes back, catches up and the
	// master accepts and confirms sends again.
	fs := p.slaveFS
	cfg := p.slaveCfg
	p.slave = openStore(t, cfg)
	s, err := NewSlave(SlaveConfig{Store: p.slave, FS: fs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	defer func() { cancel(); <-stopped; p.slave.Close() }()
	waitUntil(t, "slave back in sync", func() bool { return p.m.InSync() == 2 })
	waitUntil(t, "slave queue rebuilt", func() bool { return p.slave.MaxOffset("T", 0) >= n })
	got, err := p.slave.GetMessage("T", 0, 0, n, 8<<20, nil)
	if err != nil || len(got.Records) == 0 {
		t.Fatalf("get from slave: %v %v", got, err)
	}
	if r := p.master.PutMessage(context.Background(), msg("T", "again")); !r.OK() {
		t.Fatalf("put after the slave returned: %v %v", r.Status, r.Err)
	}
	if a, b := p.slave.Offset(store.Flushed), p.master.Offset(store.Written); a != b {
		t.Fatalf("slave flushed %d, master written %d", a, b)
	}
	if h := s.History(); len(h) != 1 || h[0] != p.m.History().Last() {
		t.Fatalf("slave epochs %v, master %v", h, p.m.History())
	}
}

// TestSlaveStopsOnDivergence: a slave holding bytes its master does not
// have (the master restarted with a shorter log, so a new epoch starts
// below the slave's end) is refused and stops with ErrDiverged, taking
// nothing.
func TestSlaveStopsOnDivergence(t *testing.T) {
	mfs := vfs.NewMem()
	p := startMaster(t, mfs, 1)
	p.startSlave(t, vfs.NewMem())
	for i := range 20 {
		if r := p.master.PutMessage(context.Background(), msg("T", fmt.Sprint("m", i))); !r.OK() {
			t.Fatal(r.Status, r.Err)
		}
	}
	end := p.master.Offset(store.Written)
	waitUntil(t, "slave caught up", func() bool { return p.slave.Offset(store.Flushed) == end })
	p.stopSlave()
	p.stopMaster()

	// A master whose log is shorter than the slave's in the same epoch
	// (as an ASYNC_FLUSH master's after a power loss, or one started on
	// another data directory): epoch (1, 0) on both, the slave longer.
	short := vfs.NewMem()
	p2 := startMaster(t, short, 1)
	defer p2.stopMaster()
	for i := range 10 {
		if r := p2.master.PutMessage(context.Background(), msg("T", fmt.Sprint("other", i))); !r.OK() {
			t.Fatal(r.Status, r.Err)
		}
	}
	s, err := NewSlave(SlaveConfig{Store: p.slave, FS: p.slaveFS, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p2.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(context.Background())
	if !errors.Is(err, ErrDiverged) {
		t.Fatalf("Run on a diverged log: %v", err)
	}
	if w := p.slave.Offset(store.Written); w != end {
		t.Fatalf("diverged slave wrote: %d, was %d", w, end)
	}
	p.slave.Close()
}

// TestSlaveStopsOnUnrelatedMaster: a slave pointed at another master
// whose log is longer and whose epochs happen to be the same (another
// group's, or a master started on another data directory) is refused by
// the CRC of its last record and stops, taking nothing.
func TestSlaveStopsOnUnrelatedMaster(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 1)
	p.startSlave(t, vfs.NewMem())
	for i := range 10 {
		if r := p.master.PutMessage(context.Background(), msg("T", fmt.Sprint("a", i))); !r.OK() {
			t.Fatal(r.Status, r.Err)
		}
	}
	end := p.master.Offset(store.Written)
	waitUntil(t, "slave caught up", func() bool { return p.slave.Offset(store.Flushed) == end })
	p.stopSlave()
	p.stopMaster()

	other := startMaster(t, vfs.NewMem(), 1)
	defer other.stopMaster()
	for i := range 30 {
		if r := other.master.PutMessage(context.Background(), msg("T", fmt.Sprint("b", i))); !r.OK() {
			t.Fatal(r.Status, r.Err)
		}
	}
	if other.m.History()[0] != p.m.History()[0] || other.master.Offset(store.Written) <= end {
		t.Fatalf("setup: histories %v %v, ends %d %d", other.m.History(), p.m.History(), other.master.Offset(store.Written), end)
	}
	s, err := NewSlave(SlaveConfig{Store: p.slave, FS: p.slaveFS, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: other.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Run(ctx); !errors.Is(err, ErrDiverged) {
		t.Fatalf("Run against an unrelated master: %v", err)
	}
	if w := p.slave.Offset(store.Written); w != end {
		t.Fatalf("slave wrote from an unrelated master: %d, was %d", w, end)
	}
	p.slave.Close()
}

// TestSlaveDiskFullResumes: a slave whose CommitLog write finds the disk
// full keeps nothing of that range, stays up, and catches up once writes
// succeed again.
func TestSlaveDiskFullResumes(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 1)
	defer p.stopMaster()
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "/data/commitlog/", Times: 3, Err: syscall.ENOSPC})
	cfg := storeConfig(efs)
	cfg.Replica = true
	slave := openStore(t, cfg)
	defer slave.Close()
	s, err := NewSlave(SlaveConfig{Store: slave, FS: efs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	for i := range 20 {
		if r := p.master.PutMessage(context.Background(), msg("T", fmt.Sprint("m", i))); !r.OK() {
			t.Fatal(r.Status, r.Err)
		}
	}
	end := p.master.Offset(store.Written)
	waitUntil(t, "slave caught up after the disk-full writes", func() bool {
		select {
		case err := <-stopped:
			t.Fatalf("slave stopped: %v", err)
		default:
		}
		return slave.Offset(store.Flushed) == end
	})
	if n := efs.Injected(vfs.OpWrite); n != 3 {
		t.Fatalf("%d disk-full writes injected, want 3", n)
	}
	if err := slave.Err(); err != nil {
		t.Fatalf("slave store failed: %v", err)
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}

// testLogger is the replication services' logger in tests (swap in a
// text handler on os.Stderr to see them).
var testLogger = slog.New(slog.DiscardHandler)
