package replication

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// serveMaster starts a SYNC_MASTER on the store in fs at epoch (0: the
// next one) on a loopback port.
func serveMaster(t *testing.T, fs vfs.FS, epoch uint32, minISR int) (*store.Store, *Master, string, func()) {
	t.Helper()
	st := openStore(t, (*pair)(nil).masterStoreConfig(fs))
	m, err := NewMaster(MasterConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", Sync: true,
		MinInSyncReplicas: minISR, AckTimeout: time.Second, HeartbeatInterval: 50 * time.Millisecond, Epoch: epoch, Logger: testLogger})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Serve(ctx, ln); close(done) }()
	return st, m, ln.Addr().String(), func() { cancel(); <-done; st.Close() }
}

// TestFencedSlaveRefusesOlderMaster: a replica that promised epoch e
// closes its session with a master below e at once (a clear log line),
// writes nothing more of it, so the SYNC_MASTER can acknowledge nothing;
// it follows the master elected at e.
func TestFencedSlaveRefusesOlderMaster(t *testing.T) {
	mfs := vfs.NewMem()
	mst, m, addr, stopOld := serveMaster(t, mfs, 0, 2)
	sfs := vfs.NewMem()
	scfg := storeConfig(sfs)
	scfg.Replica = true
	sst := openStore(t, scfg)
	logs := &syncBuffer{}
	s, err := NewSlave(SlaveConfig{Store: sst, FS: sfs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Error(err)
		}
		sst.Close()
	}()
	waitUntil(t, "slave in sync", func() bool { return m.InSync() == 2 })
	p := &pair{master: mst, m: m, slave: sst}
	if st := p.send(t, "before"); st != store.PutOK {
		t.Fatalf("send before the fence: %v", st)
	}

	old := m.Epoch()
	s.Fence(old + 1)
	if got := s.FencedEpoch(); got != old+1 {
		t.Fatalf("promised %d, want %d", got, old+1)
	}
	held := sst.Offset(store.Written)
	waitUntil(t, "the fenced replica out of the in-sync set", func() bool { return m.InSync() == 1 })
	for i := 0; i < 5; i++ {
		if st := p.send(t, "after"); st == store.PutOK {
			t.Fatal("a master below the replica's promise acknowledged a send")
		}
	}
	// Each refused session logs the line: three of them are reconnections
	// to the old master refused after the fence, none of which wrote.
	waitUntil(t, "three refused sessions", func() bool {
		return strings.Count(logs.String(), "session closed: the master's epoch is below the one this replica promised") >= 3
	})
	if got := sst.Offset(store.Written); got != held {
		t.Fatalf("the fenced replica wrote %d bytes of the old master", got-held)
	}

	// The master elected at the promised epoch, on the old master's log.
	stopOld()
	_, nm, naddr, stopNew := serveMaster(t, mfs, old+1, 2)
	defer stopNew()
	if nm.Epoch() != old+1 {
		t.Fatalf("new master at epoch %d, want %d", nm.Epoch(), old+1)
	}
	s.SetMasterAddr(naddr)
	waitUntil(t, "the replica follows the new master", func() bool { return nm.InSync() == 2 })
}

// TestFencedMasterStopsAcknowledging: a master told of a newer epoch
// refuses every send at once with a clear error, its store's put gate
// too (nothing is written), SYNC or ASYNC.
func TestFencedMasterStopsAcknowledging(t *testing.T) {
	for _, sync := range []bool{true, false} {
		fs := vfs.NewMem()
		var st *store.Store
		var m *Master
		stop := func() {}
		if sync {
			st, m, _, stop = serveMaster(t, fs, 0, 1)
		} else {
			st = openStore(t, storeConfig(fs))
			var err error
			if m, err = NewMaster(MasterConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", Logger: testLogger}); err != nil {
				t.Fatal(err)
			}
			stop = func() { st.Close() }
		}
		if r := st.PutMessage(context.Background(), msg("T", "before")); !r.OK() {
			t.Fatalf("sync=%v: put before the fence: %v %v", sync, r.Status, r.Err)
		}
		m.Fence(m.Epoch()) // its own epoch: no effect
		if r := m.CheckSend(); !r.OK() {
			t.Fatalf("sync=%v: fenced at its own epoch: %v", sync, r.Err)
		}
		m.Fence(m.Epoch() + 2)
		w := st.Offset(store.Written)
		r := m.CheckSend()
		if r.OK() || r.Status != store.PutServiceNotAvailable || !strings.Contains(r.Err.Error(), "was replaced") {
			t.Fatalf("sync=%v: fenced master's CheckSend: %v %v", sync, r.Status, r.Err)
		}
		if r := st.PutMessage(context.Background(), msg("T", "after")); r.OK() {
			t.Fatalf("sync=%v: the fenced master's store took a put", sync)
		}
		if got := st.Offset(store.Written); got != w {
			t.Fatalf("sync=%v: %d bytes written after the fence", sync, got-w)
		}
		if m.Fenced() != m.Epoch()+2 {
			t.Fatalf("sync=%v: Fenced %d", sync, m.Fenced())
		}
		stop()
	}
}

// TestMasterAtGivenEpoch: a master started at a controller's epoch
// appends exactly it; an epoch not above the history is refused.
func TestMasterAtGivenEpoch(t *testing.T) {
	fs := vfs.NewMem()
	_, m, _, stop := serveMaster(t, fs, 4, 1)
	if m.Epoch() != 4 || len(m.History()) != 1 {
		t.Fatalf("history %v", m.History())
	}
	stop()
	st := openStore(t, (*pair)(nil).masterStoreConfig(fs))
	defer st.Close()
	if _, err := NewMaster(MasterConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", Sync: true, Epoch: 4}); err == nil {
		t.Fatal("a second start at epoch 4 was accepted")
	}
	m2, err := NewMaster(MasterConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", Sync: true, Epoch: 6})
	if err != nil || m2.Epoch() != 6 {
		t.Fatalf("epoch 6: %v %v", m2, err)
	}
}

// TestRequiredReplicasHoldConfirmation: a replica of the controller's
// in-sync set that is not connected holds every confirmation (a send is
// answered without SEND_OK) until it leaves the required set.
func TestRequiredReplicasHoldConfirmation(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 1)
	defer p.stopMaster()
	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	waitUntil(t, "slave in sync", func() bool { return p.m.InSync() == 2 })
	if ids := p.m.InSyncIDs(); len(ids) != 1 || ids[0] != 1 {
		t.Fatalf("in sync %v", ids)
	}
	p.m.SetRequired([]int64{1, 2}) // replica 2 never connected
	if st := p.send(t, "held"); st != store.PutFlushSlaveTimeout {
		t.Fatalf("send while a required replica is away: %v", st)
	}
	p.m.SetRequired([]int64{1})
	if st := p.send(t, "after"); st != store.PutOK {
		t.Fatalf("send once the away replica is no longer required: %v", st)
	}
}
