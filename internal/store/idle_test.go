package store

import (
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// An idle store does not rewrite an unchanged checkpoint (each write is a
// file write, an fdatasync and a directory sync every persist round), and
// the persister still moves it promptly once a message arrives.
func TestCheckpointNotRewrittenWhileIdle(t *testing.T) {
	mem := vfs.NewMem()
	cfg := testConfig(mem)
	clock := newFakeClock()
	cfg.Now = clock.Now
	s := mustOpen(t, cfg)
	defer s.Close()
	put(t, s, newMsg("T", 0, "one", nil))
	waitVisible(t, s, "T", 0, 1)
	var first checkpoint
	waitUntil(t, "the first message's checkpoint", func() bool {
		cp, err := readCheckpoint(mem, "/data")
		first = cp
		return err == nil && cp.CQFlushed > 0 && cp.CQFlushed == s.VisibleOffset()
	})
	clock.Add(time.Minute)
	for range 3 {
		if err := s.persistProgress(); err != nil {
			t.Fatal(err)
		}
	}
	if cp, err := readCheckpoint(mem, "/data"); err != nil || cp != first {
		t.Fatalf("idle persist rounds rewrote the checkpoint: %+v (%v), was %+v", cp, err, first)
	}
	put(t, s, newMsg("T", 0, "two", nil))
	waitVisible(t, s, "T", 0, 2)
	waitUntil(t, "the checkpoint to move past the second message", func() bool {
		cp, err := readCheckpoint(mem, "/data")
		return err == nil && cp.CQFlushed > first.CQFlushed && cp.WrittenAtMs == clock.Now().UnixMilli()
	})
}
