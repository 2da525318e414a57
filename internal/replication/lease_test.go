package replication

import (
	"context"
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
