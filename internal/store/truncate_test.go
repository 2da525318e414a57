package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// truncFixture: a master of n messages on queue R/0, and a SYNC_FLUSH
// replica holding (and having flushed) all of it, shown up to ends[shown-1].
type truncFixture struct {
	master *Store
	fs     *vfs.MemFS
	cfg    Config
	ends   []int64 // end of each message
}

func newTruncFixture(t *testing.T, n, shown int) (*truncFixture, *Store) {
	t.Helper()
	master := mustOpen(t, testConfig(vfs.NewMem()))
	t.Cleanup(func() { master.Close() })
	f := &truncFixture{master: master, fs: vfs.NewMem()}
	for i := range n {
		m := newMsg("R", 0, fmt.Sprintf("m%d-%0300d", i, i), nil)
		put(t, master, m)
		f.ends = append(f.ends, m.PhysOffset+int64(m.StoredSize())+commitlog.TrailerBytes)
	}
	f.cfg = testConfig(f.fs)
	f.cfg.Replica = true
	f.cfg.FlushDiskType = SyncFlush
	replica := mustOpen(t, f.cfg)
	var buf []byte
	for pos := int64(0); pos < master.Offset(Written); {
		raw, next, err := master.ReadReplication(pos, 0, 4<<10, buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := replica.AppendReplicated(pos, raw); err != nil {
			t.Fatal(err)
		}
		pos, buf = next, raw
	}
	if err := replica.WaitFor(context.Background(), Flushed, master.Offset(Written), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	replica.AdvanceReplicated(f.ends[shown-1])
	waitVisible(t, replica, "R", 0, int64(shown))
	return f, replica
}

// sameBytes fails unless the replica's log is the master's up to its end.
func (f *truncFixture) sameBytes(t *testing.T, replica *Store) {
	t.Helper()
	w := replica.Offset(Written)
	seg := replica.SegmentBytes()
	for off := int64(0); off < w; {
		n := min(w, off-off%seg+seg) - off
		a, b := make([]byte, n), make([]byte, n)
		errA, errB := f.master.ReadCommitLog(a, off), replica.ReadCommitLog(b, off)
		if errors.Is(errA, commitlog.ErrNoRecord) && errors.Is(errB, commitlog.ErrNoRecord) {
			off += n // the blank tail of a closed segment (files end at the marker)
			continue
		}
		if errA != nil || errB != nil {
			// A closed segment's file ends after its blank marker: compare
			// up to the marker.
			n = min(n, 64)
			a, b = a[:n], b[:n]
			if errA, errB = f.master.ReadCommitLog(a, off), replica.ReadCommitLog(b, off); errA != nil || errB != nil {
				t.Fatalf("read at %d: master %v, replica %v", off, errA, errB)
			}
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("replica's bytes at [%d, %d) differ from the master's", off, off+n)
		}
		off += n
	}
}

// TestTruncateReplicaRules: a truncation below what the replica showed,
// or inside a record, is refused and changes nothing; one at a record
// boundary past it moves the written offset back, and the master's bytes
// can be appended there again.
func TestTruncateReplicaRules(t *testing.T) {
	f, replica := newTruncFixture(t, 60, 10)
	defer replica.Close()
	w := replica.Offset(Written)
	if err := replica.TruncateReplica(f.ends[5]); !errors.Is(err, ErrTruncateVisible) {
		t.Fatalf("truncate below visible: %v", err)
	}
	if err := replica.TruncateReplica(f.ends[30] - 7); !errors.Is(err, commitlog.ErrNotBoundary) {
		t.Fatalf("truncate inside a record: %v", err)
	}
	if got := replica.Offset(Written); got != w {
		t.Fatalf("refused truncations moved written to %d, was %d", got, w)
	}
	T := f.ends[30]
	if err := replica.TruncateReplica(T); err != nil {
		t.Fatal(err)
	}
	if got := replica.Offset(Written); got != T {
		t.Fatalf("written %d after truncating to %d", got, T)
	}
	if got := replica.Offset(Flushed); got != T {
		t.Fatalf("flushed %d after truncating to %d", got, T)
	}
	if got := replica.counters["R"][0]; got != 31 {
		t.Fatalf("queue counter %d after truncation, want 31", got)
	}
	raw, _, err := f.master.ReadReplication(T, 0, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replica.AppendReplicated(T, raw); err != nil {
		t.Fatalf("append at the truncation point: %v", err)
	}
	f.sameBytes(t, replica)
	replica.AdvanceReplicated(f.master.Offset(Written))
	waitVisible(t, replica, "R", 0, int64(min(60, 31+countRecords(t, raw))))
}

func countRecords(t *testing.T, raw []byte) int {
	n := 0
	if _, err := commitlog.WalkRaw(raw, 0, 1<<40, func(_ int64, _ []byte, blank bool) error {
		if !blank {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTruncateReplicaCrashAtEveryStep: a power loss after any durable
// step of a truncation (intent written, log cut, checkpoint rewritten,
// intent removed) never brings the tail back: the reopened replica ends
// at the truncation point (Open finishes what the intent says), with the
// master's bytes before it, and opens without refusing.
func TestTruncateReplicaCrashAtEveryStep(t *testing.T) {
	for _, step := range []string{TruncateStepIntent, TruncateStepLog, TruncateStepCheckpoint, TruncateStepDone} {
		t.Run(step, func(t *testing.T) {
			f, replica := newTruncFixture(t, 400, 10) // several segments
			T := f.ends[40]
			var crashed *vfs.MemFS
			replica.cfg.TruncateFailpoint = func(s string) {
				if s == step {
					crashed = f.fs.CrashClone()
				}
			}
			if err := replica.TruncateReplica(T); err != nil {
				t.Fatal(err)
			}
			replica.Close()
			cfg := f.cfg
			cfg.FS = crashed
			after := mustOpen(t, cfg)
			defer after.Close()
			if got := after.Offset(Written); got != T {
				t.Fatalf("after a crash at %q the replica ends at %d, truncated to %d", step, got, T)
			}
			f.sameBytes(t, after)
			if _, err := crashed.Stat("/data/" + truncateIntentName); err == nil {
				t.Fatal("the intent is still there after Open")
			}
			// It shows what it showed before, not the rest of the log.
			if got := after.MaxOffset("R", 0); got < 10 || got > 41 {
				t.Fatalf("queue max offset %d after reopening", got)
			}
		})
	}
}

// TestTruncateIntentUnreadable: an intent that does not decode stops
// Open (it never guesses where the log ends).
func TestTruncateIntentUnreadable(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.Replica = true
	s := mustOpen(t, cfg)
	s.Close()
	if err := vfs.WriteFileDurable(fs, "/data/"+truncateIntentName, []byte("keel-truncate 1\nx\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(cfg); err == nil {
		t.Fatal("Open with an unreadable truncation intent succeeded")
	}
}

// TestCompareHonoursTruncationIntent: comparing a replica that stopped in
// the middle of a truncation takes its log to end at the truncation point,
// where its next Open cuts it.
func TestCompareHonoursTruncationIntent(t *testing.T) {
	f, replica := newTruncFixture(t, 60, 10)
	T := f.ends[30]
	replica.Close()
	if err := writeTruncateIntent(f.fs, "/data", T); err != nil {
		t.Fatal(err)
	}
	mcfg := f.master.cfg
	f.master.Close()
	c, err := Compare(mcfg, f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if c.B.EndOffset != T || c.To != T || c.Differs {
		t.Fatalf("comparison %+v; the replica's truncation goes to %d", c, T)
	}
}

// TestCheckpointCappedAfterLostTail: a checkpoint that says more was
// dispatched than the log recovered (a replica showed records a power
// loss then took from its unsynced log) is corrected at Open: otherwise,
// once the log grew past that offset again and the store crashed before
// its next checkpoint, recovery took the new records' queue entries for
// durable and left a gap in their queues.
func TestCheckpointCappedAfterLostTail(t *testing.T) {
	master := mustOpen(t, testConfig(vfs.NewMem()))
	defer master.Close()
	for i := range 40 {
		put(t, master, newMsg("R", int32(i%2), fmt.Sprintf("m%d-%0200d", i, i), nil))
	}
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.Replica = true
	cfg.FlushInterval, cfg.FlushConsumeQueueInterval = time.Hour, time.Hour // only when asked
	copyTo := func(r *Store, to int64) {
		t.Helper()
		for pos := r.Offset(Written); pos < to; {
			raw, next, err := master.ReadReplication(pos, to, 2<<10, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.AppendReplicated(pos, raw); err != nil {
				t.Fatal(err)
			}
			pos = next
		}
	}
	r := mustOpen(t, cfg)
	half := master.Offset(Written) / 2
	raw, _, _ := master.ReadReplication(0, half, 1<<20, nil)
	copyTo(r, int64(len(raw))) // the first half, flushed
	if err := r.WaitFor(context.Background(), Flushed, r.Offset(Written), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	flushed := r.Offset(Written)
	copyTo(r, master.Offset(Written)) // the rest, never flushed, but shown
	r.AdvanceReplicated(master.Offset(Written))
	waitVisible(t, r, "R", 0, 20)
	if err := r.persistProgress(); err != nil { // checkpoint: all dispatched
		t.Fatal(err)
	}
	cfg.FS = fs.CrashClone() // power loss (Close then writes nothing the clone sees)
	r.Close()

	r = mustOpen(t, cfg)
	if w := r.Offset(Written); w != flushed {
		t.Fatalf("after the power loss the log ends at %d, flushed was %d", w, flushed)
	}
	copyTo(r, master.Offset(Written)) // the same records again, flushed, no checkpoint
	if err := r.WaitFor(context.Background(), Flushed, r.Offset(Written), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	cfg.FS = cfg.FS.(*vfs.MemFS).CrashClone()
	r.Close()

	r = mustOpen(t, cfg)
	defer r.Close()
	r.AdvanceReplicated(master.Offset(Written))
	waitVisible(t, r, "R", 0, 20)
	waitVisible(t, r, "R", 1, 20)
	if err := r.Err(); err != nil {
		t.Fatalf("replica failed: %v", err)
	}
}

// TestTruncateClosedBelowShown: a closed replica told to cut below what
// it showed opens with its log ending there, its queues without the
// entries past it, showing nothing past it, and takes the master's bytes
// from there.
func TestTruncateClosedBelowShown(t *testing.T) {
	f, replica := newTruncFixture(t, 60, 40)
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}
	T := f.ends[20]
	if err := TruncateClosed(f.fs, f.cfg.Dir, T); err != nil {
		t.Fatal(err)
	}
	replica = mustOpen(t, f.cfg)
	defer replica.Close()
	if got := replica.Offset(Written); got != T {
		t.Fatalf("written %d after the cut at %d", got, T)
	}
	if v := replica.VisibleOffset(); v > T {
		t.Fatalf("visible %d past the cut at %d", v, T)
	}
	if got := replica.MaxOffset("R", 0); got != 21 {
		t.Fatalf("queue R/0 ends at %d after the cut, want 21", got)
	}
	r, err := replica.GetMessage("R", 0, 20, 64, 1<<20, nil)
	if err != nil || len(r.Records) != 1 {
		t.Fatalf("read entry 20: %v, %d records", err, len(r.Records))
	}
	r.Release()
	raw, _, err := f.master.ReadReplication(T, 0, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replica.AppendReplicated(T, raw); err != nil {
		t.Fatalf("append at the cut: %v", err)
	}
	f.sameBytes(t, replica)
}
