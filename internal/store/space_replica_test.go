package store

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// TestReplicatedWritesAdmittedAgainstFreeSpace: on a replica whose disk
// is below the reserve, AppendReplicated refuses the range with
// ErrDiskFull and writes nothing; the store is full, not failed, and
// takes the same range once space returns.
func TestReplicatedWritesAdmittedAgainstFreeSpace(t *testing.T) {
	f, replica := newTruncFixture(t, 5, 5)
	defer replica.Close()
	for i := range 5 {
		put(t, f.master, newMsg("R", 0, fmt.Sprintf("more-%d", i), nil))
	}
	end := replica.Offset(Written)
	raw, _, err := f.master.ReadReplication(end, 0, 64<<10, nil)
	if err != nil || len(raw) == 0 {
		t.Fatalf("read the master: %d bytes, %v", len(raw), err)
	}
	total, free, _ := f.fs.DiskUsage("/data")
	f.fs.SetCapacity(total - free + 1<<10)
	if _, err := replica.checkDisk(); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.AppendReplicated(end, raw); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("append with the disk full: %v", err)
	}
	if w := replica.Offset(Written); w != end {
		t.Fatalf("a refused range wrote %d bytes", w-end)
	}
	if err := replica.Err(); err != nil {
		t.Fatalf("store failed: %v", err)
	}
	if err := replica.ReplicaSpace(); !errors.Is(err, ErrDiskFull) || !replica.Stats().DiskFull {
		t.Fatalf("ReplicaSpace %v, DiskFull %v", err, replica.Stats().DiskFull)
	}

	f.fs.SetCapacity(vfs.DefaultMemCapacity)
	deadline := time.Now().Add(5 * time.Second)
	for replica.ReplicaSpace() != nil { // measured again within diskFullRecheck
		if time.Now().After(deadline) {
			t.Fatal("still full after space returned")
		}
		time.Sleep(time.Millisecond)
	}
	next, err := replica.AppendReplicated(end, raw)
	if err != nil || next != end+int64(len(raw)) {
		t.Fatalf("append after space returned: %d %v", next, err)
	}
}

// TestDeleteReplicatedTopicOnlyFromSystemFunc: the replica's topic
// deletion runs only where the dispatcher hands a system record (it
// relies on the dispatcher's lock), and only on a replica.
func TestDeleteReplicatedTopicOnlyFromSystemFunc(t *testing.T) {
	f, replica := newTruncFixture(t, 3, 3)
	defer replica.Close()
	if err := replica.DeleteReplicatedTopic("R", replica.Offset(Written)); !errors.Is(err, ErrNotInSystemFunc) {
		t.Fatalf("outside a SystemFunc: %v", err)
	}
	if n := replica.MaxOffset("R", 0); n != 3 {
		t.Fatalf("queue changed: %d entries", n)
	}
	if err := f.master.DeleteReplicatedTopic("R", 1); err == nil {
		t.Fatal("a master's store took a replicated deletion")
	}
}
