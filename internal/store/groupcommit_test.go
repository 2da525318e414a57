package store

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

func syncStore(t *testing.T, delay time.Duration) *Store {
	t.Helper()
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	cfg.GroupCommitDelay = delay
	s := mustOpen(t, cfg)
	t.Cleanup(func() { s.Close() })
	return s
}

// returnsWithin runs fn and fails the test if it does not return in time.
func returnsWithin(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

func TestGatherFlushWaitsForAppendsInProgress(t *testing.T) {
	s := syncStore(t, time.Hour)
	// Nothing in progress: no wait at all.
	returnsWithin(t, "gatherFlush with no put in progress", s.gatherFlush)

	// A put in progress: gatherFlush waits until it is appended.
	s.appending.Add(1)
	returned := make(chan struct{})
	go func() { defer close(returned); s.gatherFlush() }()
	deadline := time.Now().Add(10 * time.Second)
	for !s.gatherWait.Load() {
		if time.Now().After(deadline) {
			t.Fatal("gatherFlush never waited for the put in progress")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-returned:
		t.Fatal("gatherFlush returned while a put was in progress (delay is an hour)")
	default:
	}
	s.appendDone()
	returnsWithin(t, "gatherFlush after the append", func() { <-returned })
	if s.gatherWait.Load() {
		t.Fatal("gatherWait left set")
	}
}

// After a flush that took several puts, gatherFlush waits until as many
// were written since it ended; a lone writer's next put (its flushes take
// one put each) is flushed without a wait.
func TestGatherFlushWaitsForTheLastGroup(t *testing.T) {
	s := syncStore(t, time.Hour)
	s.lastGroup = 3 // the last flush took three puts
	s.putsAtFlushEnd.Store(s.stats.puts.Load())
	s.notePut() // the first writer it answered is back
	returned := make(chan struct{})
	go func() { defer close(returned); s.gatherFlush() }()
	waitUntil(t, "gatherFlush to wait for the other two", s.gatherWait.Load)
	select {
	case <-returned:
		t.Fatal("gatherFlush returned with one put of a group of three (delay is an hour)")
	default:
	}
	s.notePut()
	s.notePut()
	returnsWithin(t, "gatherFlush after the group's three puts", func() { <-returned })
	if s.lastGroup != 3 {
		t.Fatalf("lastGroup %d after a gather of three puts, want 3", s.lastGroup)
	}

	// A lone writer: the flush took its one put, and its next put is here.
	s.lastGroup = 1
	s.putsAtFlushEnd.Store(s.stats.puts.Load())
	s.notePut()
	returnsWithin(t, "gatherFlush for a lone writer's put", s.gatherFlush)
}

func TestGatherFlushBoundedByDelay(t *testing.T) {
	s := syncStore(t, time.Millisecond)
	s.appending.Add(1) // a put that never finishes its append
	defer s.appendDone()
	returnsWithin(t, "gatherFlush with a stuck put", s.gatherFlush)
}

// After a flush that took CommitSiblings puts or more, the next one waits
// CommitDelay before it gathers; after a lone writer's, it does not wait.
func TestCommitDelayAfterAGroup(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	cfg.CommitDelay = 30 * time.Millisecond
	cfg.CommitSiblings = 4
	s := mustOpen(t, cfg)
	defer s.Close()

	s.lastGroup = 4
	s.putsAtFlushEnd.Store(s.stats.puts.Load() - 4) // the group is back
	start := time.Now()
	s.gatherFlush()
	if d := time.Since(start); d < cfg.CommitDelay {
		t.Fatalf("gatherFlush after a group of 4 returned in %v, before the commit delay of %v", d, cfg.CommitDelay)
	}

	// Three puts: below the siblings, no delay (an hour's would show).
	s.cfg.CommitDelay = time.Hour
	s.lastGroup = 3
	s.putsAtFlushEnd.Store(s.stats.puts.Load() - 3)
	returnsWithin(t, "gatherFlush after a group of 3", s.gatherFlush)
	s.lastGroup = 1
	s.putsAtFlushEnd.Store(s.stats.puts.Load() - 1)
	returnsWithin(t, "gatherFlush after a lone writer's flush", s.gatherFlush)
}

// Closing the store ends a commit delay.
func TestCommitDelayEndsOnClose(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	cfg.CommitDelay = time.Hour
	cfg.CommitSiblings = 2
	s := mustOpen(t, cfg)
	returned := make(chan struct{})
	go func() { defer close(returned); s.delayCommit() }()
	waitUntil(t, "delayCommit to start", func() bool { return s.Stats().DelayedCommits == 1 })
	select {
	case <-returned:
		t.Fatal("delayCommit returned before the delay of an hour or a close")
	default:
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	returnsWithin(t, "delayCommit after Close", func() { <-returned })
}

// Many writers under a commit delay alone (no GroupCommitDelay): every
// acknowledged put survives a power loss, and they took fewer fdatasyncs
// than puts.
func TestCommitDelayConcurrentWritersDurable(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.FlushDiskType = SyncFlush
	cfg.CommitLogSegmentBytes = 1 << 20
	cfg.CommitDelay = 2 * time.Millisecond
	cfg.CommitSiblings = 2
	cfg.GroupCommitDelay = -1
	var flushes atomic.Int64
	var delayed int64
	cfg.OnFlush = func(time.Duration, int64) { flushes.Add(1) }
	n := concurrentWritersSurvivePowerLoss(t, fs, cfg, func(s *Store) { delayed = s.Stats().DelayedCommits })
	if delayed == 0 || flushes.Load() >= int64(n) {
		t.Errorf("%d fdatasyncs, %d of them delayed, for %d puts of 16 concurrent writers", flushes.Load(), delayed, n)
	}
}

func TestGroupCommitOnlyUnderSyncFlush(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = AsyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	if s.beforeFlush() != nil {
		t.Fatal("ASYNC_FLUSH waits before its periodic flushes")
	}
	if syncStore(t, -1).beforeFlush() != nil {
		t.Fatal("a negative GroupCommitDelay still waits")
	}
}

// Many concurrent SYNC_FLUSH writers all get acknowledged, and every
// acknowledged message survives a power loss.
func TestGroupCommitConcurrentWritersDurable(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.FlushDiskType = SyncFlush
	cfg.CommitLogSegmentBytes = 1 << 20
	concurrentWritersSurvivePowerLoss(t, fs, cfg, nil)
}

// concurrentWritersSurvivePowerLoss has 16 writers put 20 messages each
// into a store opened with cfg on fs, crashes fs, and checks that every
// acknowledged message is there after a reopen. It returns the puts;
// before the crash it calls done (if not nil) with the store.
func concurrentWritersSurvivePowerLoss(t *testing.T, fs *vfs.MemFS, cfg Config, done func(*Store)) int {
	t.Helper()
	s := mustOpen(t, cfg)
	var wg sync.WaitGroup
	var mu sync.Mutex
	acked := map[int64]string{}
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				body := fmt.Sprintf("w%d-%d", w, i)
				m := newMsg("G", int32(w%4), body, nil)
				if r := s.PutMessage(context.Background(), m); r.Status != PutOK {
					t.Errorf("put: %v %v", r.Status, r.Err)
					return
				}
				mu.Lock()
				acked[m.PhysOffset] = body
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if done != nil {
		done(s)
	}
	fs.Crash()
	s2 := mustOpen(t, cfg)
	defer s2.Close()
	for phys, body := range acked {
		rec, err := s2.LookMessageByOffset(phys)
		if err != nil {
			t.Fatalf("acknowledged message at %d lost: %v", phys, err)
		}
		if got := string(message.View(rec).Body()); got != body {
			t.Fatalf("message at %d: body %q, want %q", phys, got, body)
		}
	}
	return len(acked)
}

// writeSizeFS records the largest single write to a CommitLog segment.
type writeSizeFS struct {
	vfs.FS
	mu  sync.Mutex
	max int
}

type writeSizeFile struct {
	vfs.File
	fs *writeSizeFS
}

func (w *writeSizeFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := w.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, "commitlog") {
		return f, err
	}
	return &writeSizeFile{File: f, fs: w}, nil
}

func (f *writeSizeFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	f.fs.max = max(f.fs.max, len(p))
	f.fs.mu.Unlock()
	return f.File.WriteAt(p, off)
}

// TestCombinedAppendIsBounded queues far more than maxCombinedBytes of
// puts behind a held appendMu: they must all be written, in order, and no
// single CommitLog write may exceed the bound (plus one request).
func TestCombinedAppendIsBounded(t *testing.T) {
	fsys := &writeSizeFS{FS: vfs.NewMem()}
	cfg := testConfig(fsys)
	cfg.CommitLogSegmentBytes = 256 << 20
	cfg.MaxMessageBytes = 512 << 10
	s := mustOpen(t, cfg)
	defer s.Close()

	const puts, body = 40, 300 << 10 // 12 MiB queued, three times the bound
	s.appendMu.Lock()
	var wg sync.WaitGroup
	results := make([]PutResult, puts)
	for i := range puts {
		wg.Go(func() {
			results[i] = s.PutMessage(context.Background(), newMsg("t", 0, strings.Repeat("x", body), nil))
		})
	}
	waitUntil(t, "every put to queue behind the held append lock", func() bool {
		s.pendMu.Lock()
		defer s.pendMu.Unlock()
		return len(s.pending) == puts
	})
	s.appendMu.Unlock()
	returnsWithin(t, "the queued puts", wg.Wait)

	for i, r := range results {
		if r.Status != PutOK {
			t.Fatalf("put %d: %v %v", i, r.Status, r.Err)
		}
	}
	waitVisible(t, s, "t", 0, puts) // acknowledged; dispatch follows
	for qo := range int64(puts) {
		got, err := s.GetMessage("t", 0, qo, 1, 1<<20, nil)
		if err != nil {
			t.Fatalf("queue offset %d: %v", qo, err)
		}
		if len(got.Records) != 1 {
			t.Fatalf("queue offset %d: %d records", qo, len(got.Records))
		}
		got.Release()
	}
	fsys.mu.Lock()
	largest := fsys.max
	fsys.mu.Unlock()
	if limit := maxCombinedBytes + body + 4096; largest > limit {
		t.Fatalf("largest CommitLog write %d bytes, bound %d", largest, limit)
	}
	if largest < 2*body {
		t.Fatalf("largest CommitLog write %d bytes: queued puts were not combined", largest)
	}
}
