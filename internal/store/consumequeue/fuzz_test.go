package consumequeue

import (
	"errors"
	"os"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// FuzzRecover opens a queue whose last segment holds arbitrary bytes after
// a full first segment: Open must not panic, and every entry it then
// serves must be valid.
func FuzzRecover(f *testing.F) {
	good := make([]byte, 3*EntrySize)
	for i := range int64(3) {
		putEntry(good[i*EntrySize:], entryFor(10+i))
	}
	f.Add(good)
	f.Add(good[:2*EntrySize+5])
	f.Add(append(good[:EntrySize:EntrySize], make([]byte, EntrySize)...))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 20*EntrySize {
			return
		}
		fs := vfs.NewMem()
		q := openQueue(t, fs, 10, 4)
		appendRange(t, q, 0, 10)
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		w, err := fs.OpenFile(testDir+"/"+segmentName(10), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if len(data) > 0 {
			if _, err := w.WriteAt(data, 0); err != nil {
				t.Fatal(err)
			}
		}
		q, err = Open(Config{FS: fs, Dir: testDir, EntriesPerSegment: 10})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("open: %v", err)
			}
			return
		}
		if q.MinOffset() != 0 || q.MaxOffset() < 10 || q.MaxOffset() > 20 {
			t.Fatalf("bounds [%d, %d)", q.MinOffset(), q.MaxOffset())
		}
		dst := make([]Entry, 20)
		n, err := q.Get(0, dst)
		if err != nil || int64(n) != q.MaxOffset() {
			t.Fatalf("get: %d %v", n, err)
		}
		for _, e := range dst[:n] {
			if !e.valid() {
				t.Fatalf("invalid entry served: %+v", e)
			}
		}
		if err := q.Append(q.MaxOffset(), entryFor(99)); err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
	})
}
