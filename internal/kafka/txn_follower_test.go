package kafka

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// lockedBuf is a log sink goroutines write to while the test reads it.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// goroutinesIn counts the goroutines whose stack holds fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn+"(") {
			count++
		}
	}
	return count
}

// sameLog checks that the replica's CommitLog holds exactly the master's
// bytes, up to the master's written end.
func sameLog(t *testing.T, master, replica *store.Store) {
	t.Helper()
	end := master.Offset(store.Written)
	if got := replica.Offset(store.Written); got != end {
		t.Fatalf("the slave's log ends at %d, the master's at %d", got, end)
	}
	read := func(s *store.Store) []byte {
		var all []byte
		for off := int64(0); off < end; {
			b, next, err := s.ReadReplication(off, end, 1<<20, nil)
			if err != nil {
				t.Fatal(err)
			}
			if next <= off {
				t.Fatalf("no progress reading the log at %d", off)
			}
			all = append(all, b...)
			off = next
		}
		return all
	}
	if !bytes.Equal(read(master), read(replica)) {
		t.Fatal("the slave's log differs from the master's")
	}
}

// TestFollowerDoorRunsNoTxnTasks: a slave's Kafka door (Config.Follower)
// coordinates no transaction. A transaction opened on the master and
// replicated before the slave's door starts is in the state the slave
// replays, open; it times out, and the master alone aborts it (its
// records and marker reach the slave by replication): the slave's door
// runs neither the timeout nor the snapshot task, leaves the entry as it
// replayed it, logs no abort, and the slave's log is byte for byte the
// master's.
func TestFollowerDoorRunsNoTxnTasks(t *testing.T) {
	mfs := vfs.NewMem()
	m := startNodeWith(t, mfs, Config{})
	// The master's clock, which the test moves past the transaction's
	// timeout once the slave's door has replayed it (set before any
	// request: the request's socket orders it before every read).
	var skew atomic.Int64
	m.srv.parts.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	rm, err := replication.NewMaster(replication.MasterConfig{Store: m.st, FS: mfs, DataDir: "/data", BrokerName: "broker-a",
		HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	haLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	haDone := make(chan struct{})
	go func() { rm.Serve(ctx, haLn); close(haDone) }()

	sfs := vfs.NewMem()
	scfg := store.DefaultConfig("/data")
	scfg.FS = sfs
	scfg.FlushDiskType = store.SyncFlush
	scfg.CommitLogSegmentBytes = 64 << 20
	scfg.ConsumeQueueSegmentEntries = 10000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 100, 400
	scfg.Replica = true
	sst, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := replication.NewSlave(replication.SlaveConfig{Store: sst, FS: sfs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: haLn.Addr().String(), SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	sDone := make(chan struct{})
	go func() { rs.Run(sctx); close(sDone) }()
	var slaveDoor *testNode
	t.Cleanup(func() { // the slave's door, the replication, then the stores
		if slaveDoor != nil {
			slaveDoor.stop()
		} else {
			sst.Close()
		}
		scancel()
		<-sDone
		cancel()
		<-haDone
	})
	caughtUp := func(what string) {
		t.Helper()
		waitUntil(t, what, func() bool {
			end := m.st.Offset(store.Written)
			return sst.Offset(store.Written) == end && sst.Offset(store.Visible) == end
		})
	}

	if _, _, err := m.srv.autoCreate("tmo"); err != nil {
		t.Fatal(err)
	}
	x := newTxnRaw(t, m.addr, "tmo-1")
	if r := x.init(60000); r.ErrorCode != 0 {
		t.Fatal(r)
	}
	x.addParts("tmo", 0)
	if rp := x.produce("tmo", 0, 2); rp.ErrorCode != 0 {
		t.Fatalf("%+v", rp)
	}
	caughtUp("the open transaction on the slave")

	// The slave's door, on what replication brought.
	sc, err := core.New(core.Config{DataDir: "/data", FS: sfs, AutoCreateTopicEnable: true, AutoCreateSubscriptionGroup: true,
		DefaultTopicQueueNums: 2, MaxMessageSize: 4 << 20}, sst, nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuf
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	slaveDoor = &testNode{fs: sfs, st: sst, core: sc, addr: ln.Addr().String(), done: make(chan error, 1)}
	slaveDoor.srv = New(Config{Follower: true, BrokerID: 1}, sc, slog.New(slog.NewTextHandler(io.MultiWriter(&logs), &slog.HandlerOptions{Level: slog.LevelDebug})))
	go func() { slaveDoor.done <- slaveDoor.srv.Serve(ln) }()
	replayed := waitTxnState(t, slaveDoor.srv, "tmo-1", txnOngoing)
	if n := goroutinesIn("kafka.(*Server).runTxnTimeouts"); n != 1 {
		t.Fatalf("%d goroutines run transaction timeouts, want 1 (the master's)", n)
	}
	if n := goroutinesIn("kafka.(*Server).runTxnSnapshots"); n != 1 {
		t.Fatalf("%d goroutines write transaction snapshots, want 1 (the master's)", n)
	}

	skew.Store(int64(2 * time.Minute))
	select { // the master's timeout task sleeps until the timeout it knows
	case m.srv.txn.wake <- struct{}{}:
	default:
	}
	aborted := waitTxnState(t, m.srv, "tmo-1", txnCompleteAbort)
	if aborted.Epoch != x.epoch+1 {
		t.Fatalf("the master aborted at epoch %d, want %d", aborted.Epoch, x.epoch+1)
	}
	if f := fetchTxn(dialRaw(t, m.addr), "tmo", 0, 0, true); f.LastStableOffset != 3 || len(f.AbortedTransactions) != 1 {
		t.Fatalf("the master's partition after the abort: lso %d, aborted %+v", f.LastStableOffset, f.AbortedTransactions)
	}
	caughtUp("the master's abort on the slave")
	sameLog(t, m.st, sst)
	slaveDoor.srv.txn.mu.Lock()
	now := slaveDoor.srv.txn.byID["tmo-1"].e
	slaveDoor.srv.txn.mu.Unlock()
	if now != replayed || now.State != txnOngoing || now.Epoch != x.epoch {
		t.Fatalf("the slave's door changed the transaction it replayed: %+v, replayed %+v", now, replayed)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "transaction") && !strings.Contains(line, "transactions replayed from the CommitLog") {
			t.Fatalf("the slave's door logged of a transaction: %s", line)
		}
	}
}
