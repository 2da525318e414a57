package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// TestReplicaStartsAtLaterOffset: an empty replica starts its log at its
// master's first segment (the earlier ones deleted), takes the master's
// ranges from there, serves them from queues that start at the records'
// queue offsets, and keeps that start after a power loss; a replica
// holding records refuses to move its start.
func TestReplicaStartsAtLaterOffset(t *testing.T) {
	master := mustOpen(t, testConfig(vfs.NewMem()))
	defer master.Close()
	for i := range 300 { // ~4 segments of 64 KiB
		put(t, master, newMsg("R", 0, fmt.Sprintf("%d-%0800d", i, i), nil))
	}
	seg := master.SegmentBytes()
	start := 2 * seg
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.Replica = true
	replica := mustOpen(t, cfg)
	if !replica.Empty() {
		t.Fatal("a new replica is not empty")
	}
	if err := replica.StartReplicaAt(start); err != nil {
		t.Fatal(err)
	}
	if w, v := replica.Offset(Written), replica.VisibleOffset(); w != start || v != start || !replica.Empty() {
		t.Fatalf("after StartReplicaAt(%d): written %d, visible %d, empty %v", start, w, v, replica.Empty())
	}
	var buf []byte
	for pos := start; pos < master.Offset(Written); {
		raw, next, err := master.ReadReplication(pos, 0, 8<<10, buf)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := replica.AppendReplicated(pos, raw); err != nil {
			t.Fatalf("append at %d: %v", pos, err)
		}
		pos, buf = next, raw
	}
	replica.AdvanceReplicated(master.Offset(Confirmed))
	first, last := firstQueueOffsetAt(t, master, start), master.MaxOffset("R", 0)
	waitVisible(t, replica, "R", 0, last)
	if got := replica.MinOffset("R", 0); got != first {
		t.Fatalf("replica's queue starts at %d, the record at %d has queue offset %d", got, start, first)
	}
	r, err := replica.GetMessage("R", 0, first, 1, 1<<20, nil)
	if err != nil || r.Status != Found || len(r.Records) != 1 {
		t.Fatalf("get the first replicated message: %v %v", r, err)
	}
	r.Release()
	if err := replica.StartReplicaAt(3 * seg); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("StartReplicaAt on a replica holding records: %v", err)
	}
	end := replica.Offset(Written)
	replica.Close()

	// An empty start survives a power loss too.
	fs2 := vfs.NewMem()
	cfg2 := testConfig(fs2)
	cfg2.Replica = true
	r2 := mustOpen(t, cfg2)
	if err := r2.StartReplicaAt(start); err != nil {
		t.Fatal(err)
	}
	fs2.Crash()
	r2.Close()
	r2 = mustOpen(t, cfg2)
	defer r2.Close()
	if w := r2.Offset(Written); w != start || !r2.Empty() {
		t.Fatalf("after a power loss the empty replica starts at %d (empty %v), want %d", w, r2.Empty(), start)
	}
	reopened := mustOpen(t, cfg)
	defer reopened.Close()
	if w := reopened.Offset(Written); w != end {
		t.Fatalf("reopened replica ends at %d, was %d", w, end)
	}
}

// firstQueueOffsetAt returns the queue offset of R/0's first record at or
// after phys.
func firstQueueOffsetAt(t *testing.T, s *Store, phys int64) int64 {
	for qo := int64(0); qo < s.MaxOffset("R", 0); qo++ {
		r, err := s.GetMessage("R", 0, qo, 1, 1<<20, nil)
		if err != nil || len(r.Records) == 0 {
			t.Fatalf("get %d: %v", qo, err)
		}
		off := message.View(r.Records[0]).PhysOffset()
		r.Release()
		if off >= phys {
			return qo
		}
	}
	t.Fatal("no record after", phys)
	return 0
}
