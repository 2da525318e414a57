package kafka

import (
	"bytes"
	"context"
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
	"github.com/twmb/franz-go/pkg/kmsg"
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

// txnGroup is a Kafka door over a master store, replicated to a slave
// store, on which a slave's door (Config.Follower) starts when the test
// says.
type txnGroup struct {
	m     *testNode
	skew  atomic.Int64 // added to the master's clock
	sfs   *vfs.MemFS
	sst   *store.Store
	slave *testNode // nil until startSlaveDoor
	logs  lockedBuf // the slave's door's log
}

func startTxnGroup(t *testing.T) *txnGroup {
	t.Helper()
	g := &txnGroup{}
	mfs := vfs.NewMem()
	g.m = startNodeWith(t, mfs, Config{})
	// The master's clock, which a test may move past a transaction's
	// timeout (set before any request: the request's socket orders it
	// before every read).
	g.m.srv.parts.now = func() time.Time { return time.Now().Add(time.Duration(g.skew.Load())) }
	rm, err := replication.NewMaster(replication.MasterConfig{Store: g.m.st, FS: mfs, DataDir: "/data", BrokerName: "broker-a",
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

	g.sfs = vfs.NewMem()
	scfg := store.DefaultConfig("/data")
	scfg.FS = g.sfs
	scfg.FlushDiskType = store.SyncFlush
	scfg.CommitLogSegmentBytes = 64 << 20
	scfg.ConsumeQueueSegmentEntries = 10000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 100, 400
	scfg.Replica = true
	if g.sst, err = store.Open(scfg); err != nil {
		t.Fatal(err)
	}
	rs, err := replication.NewSlave(replication.SlaveConfig{Store: g.sst, FS: g.sfs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: haLn.Addr().String(), SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	sDone := make(chan struct{})
	go func() { rs.Run(sctx); close(sDone) }()
	t.Cleanup(func() { // the slave's door, the replication, then the stores
		if g.slave != nil {
			g.slave.stop()
		} else {
			g.sst.Close()
		}
		scancel()
		<-sDone
		cancel()
		<-haDone
	})
	return g
}

// caughtUp waits until the slave's store shows all the master wrote.
func (g *txnGroup) caughtUp(t *testing.T, what string) {
	t.Helper()
	waitUntil(t, what, func() bool {
		end := g.m.st.Offset(store.Written)
		return g.sst.Offset(store.Written) == end && g.sst.Offset(store.Visible) == end
	})
}

// startSlaveDoor starts the slave's core and door on what replication
// brought so far.
func (g *txnGroup) startSlaveDoor(t *testing.T) *testNode {
	t.Helper()
	sc, err := core.New(core.Config{DataDir: "/data", FS: g.sfs, AutoCreateTopicEnable: true, AutoCreateSubscriptionGroup: true,
		DefaultTopicQueueNums: 2, MaxMessageSize: 4 << 20}, g.sst, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{fs: g.sfs, st: g.sst, core: sc, addr: ln.Addr().String(), done: make(chan error, 1)}
	n.srv = New(Config{Follower: true, BrokerID: 1}, sc, slog.New(slog.NewTextHandler(&g.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	go func() { n.done <- n.srv.Serve(ln) }()
	g.slave = n
	waitTxnLoaded(t, n.srv)
	return n
}

// TestFollowerDoorRunsNoTxnTasks: a slave's Kafka door (Config.Follower)
// coordinates no transaction. A transaction opened on the master and
// replicated before the slave's door starts is in the state the slave
// replays, open; it times out (the master's clock moved past it), and the
// master alone aborts it (its records and marker reach the slave by
// replication): the slave's door runs neither the timeout nor the
// snapshot task, leaves the entry as it replayed it, logs no abort, and
// the slave's log is byte for byte the master's.
func TestFollowerDoorRunsNoTxnTasks(t *testing.T) {
	g := startTxnGroup(t)
	m := g.m
	if _, _, err := m.srv.autoCreate("tmo"); err != nil {
		t.Fatal(err)
	}
	x := openTxn(t, m.addr, "tmo-1", "tmo")
	g.caughtUp(t, "the open transaction on the slave")
	slave := g.startSlaveDoor(t)
	replayed := waitTxnState(t, slave.srv, "tmo-1", txnOngoing)
	if n := goroutinesIn("kafka.(*Server).runTxnTimeouts"); n != 1 {
		t.Fatalf("%d goroutines run transaction timeouts, want 1 (the master's)", n)
	}
	if n := goroutinesIn("kafka.(*Server).runTxnSnapshots"); n != 1 {
		t.Fatalf("%d goroutines write transaction snapshots, want 1 (the master's)", n)
	}

	g.skew.Store(int64(2 * time.Minute))
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
	g.caughtUp(t, "the master's abort on the slave")
	sameLog(t, m.st, g.sst)
	slave.srv.txn.mu.Lock()
	now := slave.srv.txn.byID["tmo-1"].e
	slave.srv.txn.mu.Unlock()
	if now != replayed || now.State != txnOngoing || now.Epoch != x.epoch {
		t.Fatalf("the slave's door changed the transaction it replayed: %+v, replayed %+v", now, replayed)
	}
	for _, line := range strings.Split(g.logs.String(), "\n") {
		if strings.Contains(line, "transaction") && !strings.Contains(line, "transactions replayed from the CommitLog") {
			t.Fatalf("the slave's door logged of a transaction: %s", line)
		}
	}
}

// TestFollowerDoorSendsReadCommittedToLeader: a slave's door knows the
// transactions only as it replayed them at its start, so it answers no
// read_committed read: with a transaction opened on the master after the
// slave's door started (its records replicated, uncommitted), a
// read_committed Fetch or ListOffsets at the slave is NOT_LEADER_OR_FOLLOWER
// with no records, where the slave would otherwise serve them as stable;
// read_uncommitted is served there as before.
func TestFollowerDoorSendsReadCommittedToLeader(t *testing.T) {
	g := startTxnGroup(t)
	m := g.m
	slave := g.startSlaveDoor(t)
	if _, _, err := m.srv.autoCreate("rc"); err != nil {
		t.Fatal(err)
	}
	if _, err := slave.core.EnsureTopic("rc", 2, core.PermRW); err != nil { // the harness's cores do not replicate topics
		t.Fatal(err)
	}
	openTxn(t, m.addr, "rc-1", "rc")
	g.caughtUp(t, "the open transaction's records on the slave")
	if f := fetchTxn(dialRaw(t, m.addr), "rc", 0, 0, true); f.ErrorCode != 0 || f.LastStableOffset != 0 || len(f.RecordBatches) != 0 {
		t.Fatalf("read_committed at the master: %+v", f)
	}
	src := dialRaw(t, slave.addr)
	if f := fetchTxn(src, "rc", 0, 0, true); f.ErrorCode != errNotLeaderOrFollower || len(f.RecordBatches) != 0 {
		t.Fatalf("read_committed at the slave: code %d, lso %d, %d bytes of records; want NOT_LEADER_OR_FOLLOWER and none",
			f.ErrorCode, f.LastStableOffset, len(f.RecordBatches))
	}
	req := kmsg.NewPtrListOffsetsRequest()
	req.ReplicaID, req.IsolationLevel = -1, 1
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = "rc"
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = 0, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if p := src.do(req, 5).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; p.ErrorCode != errNotLeaderOrFollower {
		t.Fatalf("read_committed ListOffsets at the slave: %+v, want NOT_LEADER_OR_FOLLOWER", p)
	}
	if f := fetchTxn(src, "rc", 0, 0, false); f.ErrorCode != 0 || f.HighWatermark != 2 || len(f.RecordBatches) == 0 {
		t.Fatalf("read_uncommitted at the slave: code %d, hwm %d, %d bytes", f.ErrorCode, f.HighWatermark, len(f.RecordBatches))
	}
}

// TestPreferredReadReplicaNotForReadCommitted: the leader names no slave
// as the preferred read replica of a read_committed fetch (the slave
// would refuse it: TestFollowerDoorSendsReadCommittedToLeader) and
// serves it itself; a read_uncommitted one of the same rack is sent to
// the slave.
func TestPreferredReadReplicaNotForReadCommitted(t *testing.T) {
	_, a0, _ := startRackPair(t)
	fetch := func(isolation int8) kmsg.FetchResponseTopicPartition {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxBytes, req.Rack, req.IsolationLevel = 12, 1<<20, "s", isolation
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "P"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = 1<<20, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		return dialRaw(t, a0.addr).do(req, 12).(*kmsg.FetchResponse).Topics[0].Partitions[0]
	}
	if p := fetch(1); p.ErrorCode != 0 || p.PreferredReadReplica != -1 || len(p.RecordBatches) == 0 {
		t.Fatalf("read_committed from rack s at the leader: code %d, preferred %d, %d bytes; want served here",
			p.ErrorCode, p.PreferredReadReplica, len(p.RecordBatches))
	}
	if p := fetch(0); p.ErrorCode != 0 || p.PreferredReadReplica != 2 {
		t.Fatalf("read_uncommitted from rack s at the leader: code %d, preferred %d; want the slave (2)", p.ErrorCode, p.PreferredReadReplica)
	}
}
