package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// copyLog streams master's CommitLog from the replica's end to the
// master's written offset through ReadReplication and AppendReplicated,
// in ranges of at most max bytes, and tells the replica what the master
// confirmed.
func copyLog(t *testing.T, master, replica *Store, max int) {
	t.Helper()
	var buf []byte
	for pos := replica.Offset(Written); pos < master.Offset(Written); {
		raw, next, err := master.ReadReplication(pos, 0, max, buf)
		if err != nil {
			t.Fatalf("read at %d: %v", pos, err)
		}
		end, err := replica.AppendReplicated(pos, raw)
		if err != nil {
			t.Fatalf("append at %d: %v", pos, err)
		}
		if end != next {
			t.Fatalf("append at %d ended at %d, read said %d", pos, end, next)
		}
		pos, buf = next, raw
		// As the replication service does: the replica shows what the
		// master confirmed.
		replica.AdvanceReplicated(master.Offset(Confirmed))
	}
}

// TestReplicaCopiesLogAcrossSegments: a replica fed the master's raw
// ranges holds the same log (through segment ends), serves the same
// messages from its own ConsumeQueues, and continues each queue's
// offsets; it refuses puts.
func TestReplicaCopiesLogAcrossSegments(t *testing.T) {
	master := mustOpen(t, testConfig(vfs.NewMem()))
	defer master.Close()
	rcfg := testConfig(vfs.NewMem())
	rcfg.Replica = true
	replica := mustOpen(t, rcfg)
	defer replica.Close()

	const n = 200 // 200 x ~1 KiB: several 64 KiB segments
	body := strings.Repeat("b", 1000)
	for i := range n {
		put(t, master, newMsg("R", int32(i%2), fmt.Sprintf("%d-%s", i, body), map[string]string{"KEYS": fmt.Sprint("k", i)}))
	}
	copyLog(t, master, replica, 10<<10)
	if got, want := replica.Offset(Written), master.Offset(Written); got != want {
		t.Fatalf("replica written %d, master %d", got, want)
	}
	waitVisible(t, replica, "R", 0, n/2)
	waitVisible(t, replica, "R", 1, n/2)
	r, err := replica.GetMessage("R", 1, 0, 3, 1<<20, nil)
	if err != nil || r.Status != Found {
		t.Fatalf("get: %v %v", r, err)
	}
	if b := bodies(r); len(b) != 3 || !strings.HasPrefix(b[0], "1-") || !strings.HasPrefix(b[2], "5-") {
		t.Fatalf("bodies %v", b)
	}
	for q := range int32(2) {
		if got := replica.counters["R"][q]; got != n/2 {
			t.Fatalf("queue %d counter %d, want %d", q, got, n/2)
		}
	}
	if res := replica.PutMessage(context.Background(), newMsg("R", 0, "x", nil)); res.Status != PutServiceNotAvailable || !errors.Is(res.Err, ErrReplica) {
		t.Fatalf("put on a replica: %v %v", res.Status, res.Err)
	}
}

// TestReplicaRefusesBadRanges: a range with a flipped byte, for another
// offset, or cut inside a record is refused whole and writes nothing.
func TestReplicaRefusesBadRanges(t *testing.T) {
	master := mustOpen(t, testConfig(vfs.NewMem()))
	defer master.Close()
	rcfg := testConfig(vfs.NewMem())
	rcfg.Replica = true
	replica := mustOpen(t, rcfg)
	defer replica.Close()
	for i := range 3 {
		put(t, master, newMsg("R", 0, fmt.Sprint("m", i), nil))
	}
	raw, _, err := master.ReadReplication(0, 0, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), raw...)
	bad[len(bad)-10] ^= 1
	if _, err := replica.AppendReplicated(0, bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped byte: %v", err)
	}
	if _, err := replica.AppendReplicated(0, raw[:len(raw)-3]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("cut range: %v", err)
	}
	if _, err := replica.AppendReplicated(8, raw); err == nil {
		t.Fatal("range for another offset accepted")
	}
	if w := replica.Offset(Written); w != 0 {
		t.Fatalf("refused ranges wrote: written %d", w)
	}
	if _, err := replica.AppendReplicated(0, raw); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.AppendReplicated(0, raw); !errors.Is(err, ErrReplicaNotAtEnd) {
		t.Fatalf("append again at 0: %v", err)
	}
}

// TestReplicaPowerLoss: under SYNC_FLUSH what a replica flushed survives
// a power loss, and it recovers to a log the master's next range
// continues.
func TestReplicaPowerLoss(t *testing.T) {
	master := mustOpen(t, testConfig(vfs.NewMem()))
	defer master.Close()
	fs := vfs.NewMem()
	rcfg := testConfig(fs)
	rcfg.Replica = true
	rcfg.FlushDiskType = SyncFlush
	replica := mustOpen(t, rcfg)
	for i := range 50 {
		put(t, master, newMsg("R", 0, fmt.Sprint("m", i), nil))
	}
	copyLog(t, master, replica, 1<<10)
	end := replica.Offset(Written)
	if err := replica.WaitFor(context.Background(), Flushed, end, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	replica.Close()
	replica = mustOpen(t, rcfg)
	defer replica.Close()
	if got := replica.Offset(Written); got != end {
		t.Fatalf("after power loss written %d, want %d", got, end)
	}
	for i := range 10 {
		put(t, master, newMsg("R", 0, fmt.Sprint("n", i), nil))
	}
	copyLog(t, master, replica, 1<<20)
	waitVisible(t, replica, "R", 0, 60)
}

// TestExternalReplicationTimeoutIsTheSlaves: with ExternalReplication a
// put durable locally but never confirmed by the replicas gets
// PutFlushSlaveTimeout after ReplicationTimeout, under both flush modes,
// and AdvanceReplicated acknowledges the next.
func TestExternalReplicationTimeoutIsTheSlaves(t *testing.T) {
	for _, mode := range []FlushDiskType{SyncFlush, AsyncFlush} {
		cfg := testConfig(vfs.NewMem())
		cfg.FlushDiskType = mode
		cfg.ExternalReplication = true
		cfg.ReplicationTimeout = 50 * time.Millisecond
		s := mustOpen(t, cfg)
		if r := s.PutMessage(context.Background(), newMsg("T", 0, "x", nil)); r.Status != PutFlushSlaveTimeout {
			t.Fatalf("%v: unconfirmed put: %v %v", mode, r.Status, r.Err)
		}
		if s.VisibleOffset() != 0 {
			t.Fatalf("%v: unconfirmed record visible", mode)
		}
		done := make(chan PutResult, 1)
		m := newMsg("T", 0, "y", nil)
		res, pending := s.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r PutResult) { done <- r })
		if !pending {
			t.Fatalf("%v: deferred put not pending: %v", mode, res)
		}
		s.AdvanceReplicated(s.Offset(Written))
		if r := <-done; r.Status != PutOK {
			t.Fatalf("%v: confirmed put: %v %v", mode, r.Status, r.Err)
		}
		waitVisible(t, s, "T", 0, 2)
		s.Close()
	}
}

// TestReplicaSyncFlushFlushesEachRangeAtOnce: under SYNC_FLUSH a replica
// flushes an appended range without waiting for its flush interval or a
// waiter: its master's sends wait for that fdatasync.
func TestReplicaSyncFlushFlushesEachRangeAtOnce(t *testing.T) {
	master := mustOpen(t, testConfig(vfs.NewMem()))
	defer master.Close()
	rcfg := testConfig(vfs.NewMem())
	rcfg.Replica = true
	rcfg.FlushDiskType = SyncFlush
	rcfg.FlushInterval = time.Hour // only a request flushes
	replica := mustOpen(t, rcfg)
	defer replica.Close()
	put(t, master, newMsg("R", 0, "x", nil))
	raw, next, err := master.ReadReplication(0, 0, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replica.AppendReplicated(0, raw); err != nil {
		t.Fatal(err)
	}
	// Polled, not WaitFor: a waiter on Flushed would ask for the flush.
	deadline := time.Now().Add(10 * time.Second)
	for replica.Offset(Flushed) < next {
		if time.Now().After(deadline) {
			t.Fatalf("replica flushed %d after 10 s, appended to %d: the range waits for a flush request", replica.Offset(Flushed), next)
		}
		time.Sleep(time.Millisecond)
	}
}
