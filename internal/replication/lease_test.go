package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// serveLeased starts a Leased ASYNC_MASTER (controller mode) on a store
// with ExternalReplication, on a loopback port, with no replica.
func serveLeased(t *testing.T) (*store.Store, *Master) {
	t.Helper()
	fs := vfs.NewMem()
	st := openStore(t, (*pair)(nil).masterStoreConfig(fs))
	m, err := NewMaster(MasterConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", Leased: true,
		HeartbeatInterval: 50 * time.Millisecond, Logger: testLogger})
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
	t.Cleanup(func() { cancel(); <-done; st.Close() })
	return st, m
}

// TestLeasedMasterAcknowledgesUnderLeaseOnly: a Leased master refuses
// sends before its first lease and after its lease ended, acknowledges
// alone (no replica) while it holds one, and never acknowledges a write
// its log confirmed only after the lease ended, even one admitted while
// the lease held.
func TestLeasedMasterAcknowledgesUnderLeaseOnly(t *testing.T) {
	st, m := serveLeased(t)
	ctx := context.Background()
	r := st.PutMessage(ctx, msg("T", "no lease yet"))
	if r.Status != store.PutServiceNotAvailable || !strings.Contains(r.Err.Error(), "holds no lease") {
		t.Fatalf("put without a lease: %v %v", r.Status, r.Err)
	}
	if st.Offset(store.Written) != 0 {
		t.Fatal("a put refused for want of a lease was written")
	}
	m.SetLease(time.Now().Add(time.Minute))
	if r := st.PutMessage(ctx, msg("T", "under the lease")); !r.OK() {
		t.Fatalf("put under a lease: %v %v", r.Status, r.Err)
	}
	if !m.Acknowledges() {
		t.Fatal("Acknowledges false under a lease")
	}

	// A short lease; the put gate admits a put while it holds, and the
	// write reaches the log only after it ended.
	st2, m2 := serveLeased(t)
	m2.SetLease(time.Now().Add(150 * time.Millisecond))
	if r := st2.PutMessage(ctx, msg("T", "first")); !r.OK() {
		t.Fatalf("first put: %v %v", r.Status, r.Err)
	}
	confirmed := st2.Offset(store.Confirmed)
	st2.SetPutGate(func() store.PutResult {
		if r := m2.CheckSend(); !r.OK() {
			return r
		}
		for m2.LeaseHeld(time.Now()) {
			time.Sleep(time.Millisecond)
		}
		return store.PutResult{Status: store.PutOK}
	})
	r = st2.PutMessage(ctx, msg("T", "admitted under the lease, written after it"))
	if r.OK() {
		t.Fatal("a write confirmed by the log after the lease ended was acknowledged")
	}
	if r.Status != store.PutFlushSlaveTimeout {
		t.Fatalf("status %v (%v), want FLUSH_SLAVE_TIMEOUT", r.Status, r.Err)
	}
	if got := st2.Offset(store.Confirmed); got != confirmed {
		t.Fatalf("confirmed moved from %d to %d without a lease", confirmed, got)
	}
	if m2.Acknowledges() {
		t.Fatal("Acknowledges true after the lease ended")
	}
	st2.SetPutGate(m2.CheckSend)
	if r := st2.PutMessage(ctx, msg("T", "after")); r.Status != store.PutServiceNotAvailable {
		t.Fatalf("put after the lease ended: %v %v", r.Status, r.Err)
	}
	// Renewed: the waiting record is confirmed, and sends go on.
	m2.SetLease(time.Now().Add(time.Minute))
	if r := st2.PutMessage(ctx, msg("T", "renewed")); !r.OK() {
		t.Fatalf("put after renewal: %v %v", r.Status, r.Err)
	}
	if st2.Offset(store.Confirmed) != st2.Offset(store.Written) {
		t.Fatalf("confirmed %d, written %d after renewal", st2.Offset(store.Confirmed), st2.Offset(store.Written))
	}
	// A fence ends it for good, lease or not.
	m2.Fence(m2.Epoch() + 1)
	if r := st2.PutMessage(ctx, msg("T", "fenced")); r.OK() {
		t.Fatal("a fenced leased master took a put")
	}
}

// runSlave starts a slave of addr on a replica store opened in fs; Run's
// result arrives on the channel.
func runSlave(t *testing.T, fs vfs.FS, addr string, truncateShown bool) (*store.Store, context.CancelFunc, chan error) {
	t.Helper()
	cfg := storeConfig(fs)
	cfg.Replica = true
	st := openStore(t, cfg)
	s, err := NewSlave(SlaveConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1, MasterAddr: addr,
		SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond, TruncateShown: truncateShown,
		Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	return st, cancel, done
}

// TestFormerAsyncMasterCutsWhatTheNewMasterLacks: an ASYNC_MASTER's
// acknowledged tail that its slave never got is in no other log; when
// the slave is the next master and the old one follows it, the old one
// (TruncateShown) stops with a ShownTruncation naming the cut and the
// records lost, instead of ErrDiverged; cut (store.TruncateClosed) and
// started again, it follows the new master byte for byte.
func TestFormerAsyncMasterCutsWhatTheNewMasterLacks(t *testing.T) {
	ctx := context.Background()
	afs, bfs := vfs.NewMem(), vfs.NewMem()
	ast := openStore(t, (*pair)(nil).masterStoreConfig(afs))
	am, err := NewMaster(MasterConfig{Store: ast, FS: afs, DataDir: "/data", BrokerName: "broker-a", Leased: true, Epoch: 1,
		HeartbeatInterval: 50 * time.Millisecond, Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	am.SetLease(time.Now().Add(time.Minute))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	actx, acancel := context.WithCancel(ctx)
	adone := make(chan struct{})
	go func() { am.Serve(actx, ln); close(adone) }()
	bst, bcancel, bdone := runSlave(t, bfs, ln.Addr().String(), false)
	for i := range 5 {
		if r := ast.PutMessage(ctx, msg("T", fmt.Sprintf("replicated-%d", i))); !r.OK() {
			t.Fatal(r.Err)
		}
	}
	waitUntil(t, "the slave holding the first five", func() bool { return bst.Offset(store.Written) == ast.Offset(store.Written) })
	bcancel()
	if err := <-bdone; err != nil {
		t.Fatal(err)
	}
	bst.Close()
	for i := range 3 {
		if r := ast.PutMessage(ctx, msg("T", fmt.Sprintf("acknowledged-only-here-%d", i))); !r.OK() {
			t.Fatal(r.Err)
		}
	}
	waitUntil(t, "the old master showing its tail", func() bool { return ast.VisibleOffset() == ast.Offset(store.Written) })
	acancel()
	<-adone
	ast.Close()

	// B, elected at epoch 2, writes other records at those offsets.
	bst = openStore(t, (*pair)(nil).masterStoreConfig(bfs))
	defer func() { bst.Close() }()
	bm, err := NewMaster(MasterConfig{Store: bst, FS: bfs, DataDir: "/data", BrokerName: "broker-a", Leased: true, Epoch: 2,
		HeartbeatInterval: 50 * time.Millisecond, Logger: testLogger})
	if err != nil {
		t.Fatal(err)
	}
	bm.SetLease(time.Now().Add(time.Minute))
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bctx, bstop := context.WithCancel(ctx)
	defer bstop()
	go bm.Serve(bctx, bln)
	cut := bst.Offset(store.Written)
	for i := range 4 {
		if r := bst.PutMessage(ctx, msg("T", fmt.Sprintf("new-master-%d", i))); !r.OK() {
			t.Fatal(r.Err)
		}
	}

	// Strict (a SYNC_MASTER group): the old master stops, diverged.
	a, cancel, done := runSlave(t, afs, bln.Addr().String(), false)
	if err := <-done; !errors.Is(err, ErrDiverged) {
		t.Fatalf("without TruncateShown: %v", err)
	}
	cancel()
	a.Close()

	a, cancel, done = runSlave(t, afs, bln.Addr().String(), true)
	err = <-done
	cancel()
	end := a.Offset(store.Written)
	a.Close()
	var shown *ShownTruncation
	if !errors.As(err, &shown) || shown.Offset != cut || shown.LogEnd != end || shown.Records != 3 {
		t.Fatalf("with TruncateShown: %v (%+v), want a cut at %d of 3 records up to %d", err, shown, cut, end)
	}
	if err := store.TruncateClosed(afs, "/data", shown.Offset); err != nil {
		t.Fatal(err)
	}
	a, cancel, done = runSlave(t, afs, bln.Addr().String(), true)
	defer func() { cancel(); <-done; a.Close() }()
	waitUntil(t, "the old master following the new one", func() bool { return a.Offset(store.Written) == bst.Offset(store.Written) })
	for off := int64(0); off < bst.Offset(store.Written); off += 64 {
		n := min(64, bst.Offset(store.Written)-off)
		x, y := make([]byte, n), make([]byte, n)
		if err := bst.ReadCommitLog(x, off); err != nil {
			t.Fatal(err)
		}
		if err := a.ReadCommitLog(y, off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(x, y) {
			t.Fatalf("logs differ at %d", off)
		}
	}
}
