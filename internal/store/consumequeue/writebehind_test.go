package consumequeue

import (
	"errors"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

func openWriteBehind(t *testing.T, fs vfs.FS, per, cache, behind int) *Queue {
	t.Helper()
	q, err := Open(Config{FS: fs, Dir: testDir, Topic: "TopicA", QueueID: 3, EntriesPerSegment: per,
		TailCacheEntries: cache, WriteBehindEntries: behind})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func fileSize(t *testing.T, fs vfs.FS, name string) int64 {
	t.Helper()
	fi, err := fs.Stat(testDir + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// Without the tail cache every read goes through readDisk, which must serve
// the entries still in the write-behind buffer.
func TestWriteBehindServesBufferedEntries(t *testing.T) {
	fs := vfs.NewMem()
	q := openWriteBehind(t, fs, 1000, -1, 8)
	appendRange(t, q, 0, 5)
	if n := fileSize(t, fs, segmentName(0)); n != 0 {
		t.Fatalf("segment holds %d bytes before the buffer filled", n)
	}
	checkRange(t, q, 0, 5, 3)
	appendRange(t, q, 5, 13) // the 9th append writes the first 8
	if n := fileSize(t, fs, segmentName(0)); n != 8*EntrySize {
		t.Fatalf("segment holds %d bytes, want 8 entries", n)
	}
	checkRange(t, q, 0, 13, 5) // reads straddle the written part and the buffer
	if e, ok := q.LastEntry(); !ok || e != entryFor(12) {
		t.Fatalf("last %+v", e)
	}
	// Retention moving the min into the buffered part.
	if _, err := q.DeleteBeforePhys(entryFor(10).PhysOffset); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, q, 10, 13)
	checkRange(t, q, 10, 13, 2)
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	// Truncation inside the buffered part is durable at once.
	appendRange(t, q, 13, 16)
	if err := q.TruncatePhys(entryFor(14).PhysOffset); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, q, 10, 14)
	fs.Crash()
	q = openWriteBehind(t, fs, 1000, -1, 8)
	checkBounds(t, q, 0, 14)
	checkRange(t, q, 0, 14, 4)
}

func TestWriteBehindFlushWritesBuffer(t *testing.T) {
	fs := vfs.NewMem()
	q := openWriteBehind(t, fs, 4, 2, 100)
	appendRange(t, q, 0, 10) // roll-overs write full segments; 2 entries stay buffered
	if n := fileSize(t, fs, segmentName(8)); n != 0 {
		t.Fatalf("last segment holds %d bytes before Flush", n)
	}
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	appendRange(t, q, 10, 11) // buffered, never flushed: lost by the crash
	fs.Crash()
	q = openWriteBehind(t, fs, 4, 2, 100)
	checkBounds(t, q, 0, 10)
	checkRange(t, q, 0, 10, 3)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openWriteBehind(t, fs, 4, 2, 100)
	appendRange(t, q, 10, 13)
	if err := q.Close(); err != nil { // Close writes and syncs the buffer
		t.Fatal(err)
	}
	fs.Crash()
	q = openWriteBehind(t, fs, 4, 2, 100)
	checkBounds(t, q, 0, 13)
	checkRange(t, q, 0, 13, 5)
}

// A failed write of the buffer (not an fdatasync) leaves the entries
// buffered and visible; the next Flush writes them.
func TestWriteBehindWriteErrorAtFlush(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	q := openWriteBehind(t, efs, 100, 4, 50)
	appendRange(t, q, 0, 6)
	efs.InjectOnce(vfs.OpWrite, "")
	if err := q.Flush(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("flush: %v", err)
	}
	checkBounds(t, q, 0, 6)
	checkRange(t, q, 0, 6, 4)
	if err := q.Flush(); err != nil {
		t.Fatalf("flush after the failed write: %v", err)
	}
	mem.Crash()
	q = openWriteBehind(t, mem, 100, 4, 50)
	checkBounds(t, q, 0, 6)
	checkRange(t, q, 0, 6, 4)
}
