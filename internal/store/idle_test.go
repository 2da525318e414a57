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

// Between passes the scrubber parks instead of ticking every 100 ms, and
// starts the next pass when it is due.
func TestScrubberParksBetweenPasses(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.ScrubBytesPerSecond = 64 << 20
	cfg.ScrubPassInterval = 300 * time.Millisecond
	s := mustOpen(t, cfg)
	defer s.Close()
	put(t, s, newMsg("T", 0, "one", nil))
	waitVisible(t, s, "T", 0, 1)
	waitUntil(t, "a first pass", func() bool { return s.ScrubStatus().Passes >= 1 })
	waitUntil(t, "the scrubber to park until the next pass", s.scrub.parked.Load)
	passes := s.ScrubStatus().Passes
	waitUntil(t, "the next pass once due", func() bool { return s.ScrubStatus().Passes > passes })
}

// With the scrubber off its goroutine parks; a failed write of the
// isolated-records registry wakes it, and it retries the write until it
// succeeds.
func TestScrubberOffRetriesRegistryWrite(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	cfg := testConfig(efs)
	cfg.ScrubBytesPerSecond = 0
	s := mustOpen(t, cfg)
	defer s.Close()
	waitUntil(t, "the idle scrubber to park", s.scrub.parked.Load)
	rule := efs.InjectWriteError(isolatedName)
	s.iso.mu.Lock()
	s.iso.recs = append(s.iso.recs, IsolatedRecord{PhysOffset: 0, Size: 1})
	s.persistIsolatedLocked()
	dirty := s.iso.dirty
	s.iso.mu.Unlock()
	if !dirty {
		t.Fatal("the injected write error did not leave the registry dirty")
	}
	efs.RemoveRule(rule)
	waitUntil(t, "the registry write to be retried", func() bool {
		s.iso.mu.Lock()
		defer s.iso.mu.Unlock()
		return !s.iso.dirty
	})
	waitUntil(t, "the scrubber to park again", s.scrub.parked.Load)
}
