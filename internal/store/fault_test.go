package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// gateFS blocks fdatasyncs of files whose path contains match (default
// "/commitlog/") while the gate is closed.
type gateFS struct {
	vfs.FS
	match   string
	mu      sync.Mutex
	gate    chan struct{} // nil: open
	blocked atomic.Int32  // Syncs waiting at the gate
}

type gateFile struct {
	vfs.File
	fs *gateFS
}

func (g *gateFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	match := g.match
	if match == "" {
		match = "/commitlog/"
	}
	if err != nil || !strings.Contains(name, match) {
		return f, err
	}
	return gateFile{f, g}, nil
}

// openSyncGated opens a SYNC_FLUSH store, with the given SyncFlushTimeout,
// on a gateFS that can hold its CommitLog fdatasyncs.
func openSyncGated(t *testing.T, timeout time.Duration) (*Store, *gateFS) {
	t.Helper()
	gfs := &gateFS{FS: vfs.NewMem()}
	cfg := testConfig(gfs)
	cfg.FlushDiskType = SyncFlush
	cfg.SyncFlushTimeout = timeout
	return mustOpen(t, cfg), gfs
}

func (g *gateFS) close() { g.mu.Lock(); g.gate = make(chan struct{}); g.mu.Unlock() }
func (g *gateFS) open() {
	g.mu.Lock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
	g.mu.Unlock()
}

func (f gateFile) Sync() error {
	f.fs.mu.Lock()
	gate := f.fs.gate
	f.fs.mu.Unlock()
	if gate != nil {
		f.fs.blocked.Add(1)
		<-gate
		f.fs.blocked.Add(-1)
	}
	return f.File.Sync()
}

// TestDispatchNotHeldBackByPersist: while the periodic persist of the
// ConsumeQueues is stuck in an fdatasync, new messages are still dispatched
// (the persister has its own goroutine; on the dispatcher's, every slow
// persist round delayed delivery).
func TestDispatchNotHeldBackByPersist(t *testing.T) {
	gfs := &gateFS{FS: vfs.NewMem(), match: "/" + consumeQueueDir + "/"}
	cfg := testConfig(gfs)
	cfg.FlushConsumeQueueInterval = 5 * time.Millisecond
	s := mustOpen(t, cfg)
	defer s.Close()
	defer gfs.open()
	put(t, s, newMsg("T", 0, "first", nil))
	waitVisible(t, s, "T", 0, 1)
	gfs.close()
	put(t, s, newMsg("T", 0, "dirty", nil)) // gives the persister a queue to sync
	waitUntil(t, "the persister to reach the ConsumeQueue fdatasync", func() bool { return gfs.blocked.Load() > 0 })
	put(t, s, newMsg("T", 0, "while persisting", nil))
	waitVisible(t, s, "T", 0, 3)
	if gfs.blocked.Load() == 0 {
		t.Fatal("the persist round ended before the check: the test proved nothing")
	}
}

// TestPersistFlushesQueuesConcurrently: a persist round of many queues has
// the fdatasyncs of several in flight at once (one after another, thousands
// of queues made a round take seconds and the checkpoint lag behind), and
// writes the checkpoint once they all return.
func TestPersistFlushesQueuesConcurrently(t *testing.T) {
	const queues = 2 * persistQueuesPerWorker // two workers
	gfs := &gateFS{FS: vfs.NewMem(), match: "/" + consumeQueueDir + "/"}
	cfg := testConfig(gfs)
	cfg.FlushConsumeQueueInterval = time.Hour // the test runs the round
	s := mustOpen(t, cfg)
	defer s.Close()
	defer gfs.open()
	for q := range int32(queues) {
		put(t, s, newMsg("T", q, "m", nil))
		waitVisible(t, s, "T", q, 1)
	}
	end := s.log.WrittenOffset()
	gfs.close()
	done := make(chan error, 1)
	go func() { done <- s.persistProgress() }()
	waitUntil(t, "two queues' fdatasyncs in flight at once", func() bool { return gfs.blocked.Load() == 2 })
	if cp, err := readCheckpoint(gfs, cfg.Dir); err == nil && cp.CQFlushed >= end {
		t.Fatalf("checkpoint covers offset %d while its queues' fdatasyncs are held", cp.CQFlushed)
	}
	gfs.open()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if cp, err := readCheckpoint(gfs, cfg.Dir); err != nil || cp.CQFlushed < end {
		t.Fatalf("after the round: checkpoint %+v, %v; want CQFlushed >= %d", cp, err, end)
	}
}

func TestSyncFlushTimeoutAndCancel(t *testing.T) {
	s, gfs := openSyncGated(t, 20*time.Millisecond)
	defer s.Close()
	defer gfs.open() // a failure with the gate closed must not hang Close
	put(t, s, newMsg("T", 0, "durable", nil))
	gfs.close()
	r := s.PutMessage(context.Background(), newMsg("T", 0, "slow", nil))
	if r.Status != PutFlushDiskTimeout || r.Err == nil {
		t.Fatalf("blocked flush: %v %v", r.Status, r.Err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r = s.PutMessage(ctx, newMsg("T", 0, "not written", nil))
	if r.Status != PutUnknownError || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("cancelled before: %v %v", r.Status, r.Err)
	}
	// Cancelled once it is appended and waiting for the flush, well before
	// the 20 ms flush timeout even on a loaded machine.
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	written := s.Offset(Written)
	go func() {
		for s.Offset(Written) == written && ctx.Err() == nil {
			time.Sleep(100 * time.Microsecond)
		}
		cancel()
	}()
	r = s.PutMessage(ctx, newMsg("T", 0, "cancelled", nil))
	if r.Status != PutUnknownError || !errors.Is(r.Err, context.Canceled) {
		t.Fatalf("cancelled while waiting: %v %v", r.Status, r.Err)
	}
	if v := s.MaxOffset("T", 0); v != 1 {
		t.Fatalf("unflushed messages visible under SYNC_FLUSH: max %d", v)
	}
	gfs.open()
	// Written-but-unacknowledged messages become durable and visible later.
	waitVisible(t, s, "T", 0, 3)
}

func TestFailedFsyncMakesStoreReadOnly(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	cfg := testConfig(efs)
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	put(t, s, newMsg("T", 0, "before", nil))
	waitVisible(t, s, "T", 0, 1)

	efs.InjectSyncError("/commitlog/")
	var wg sync.WaitGroup
	results := make(chan PutResult, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results <- s.PutMessage(context.Background(), newMsg("T", 0, fmt.Sprint(i), nil))
		}()
	}
	wg.Wait()
	close(results)
	for r := range results {
		if r.Status == PutOK {
			t.Fatal("acknowledged a message whose fsync failed")
		}
		if r.Status != PutServiceNotAvailable || !errors.Is(r.Err, ErrReadOnly) || !errors.Is(r.Err, syscall.EIO) {
			t.Fatalf("status %v err %v", r.Status, r.Err)
		}
	}
	efs.ClearRules()
	// Still refused after the fault is gone: the page cache is not trusted.
	if r := s.PutMessage(context.Background(), newMsg("T", 0, "later", nil)); r.Status != PutServiceNotAvailable {
		t.Fatalf("put after failure: %v", r.Status)
	}
	if s.Stats().ReadOnly == nil {
		t.Fatal("stats do not report read-only")
	}
	r, err := s.GetMessage("T", 0, 0, 32, 1<<20, nil)
	if err != nil || fmt.Sprint(bodies(r)) != "[before]" {
		t.Fatalf("reads after failure: %v %v", bodies(r), err)
	}
	if err := s.Close(); err == nil {
		t.Fatal("close of a failed store reported success")
	}
	if _, err := mem.Stat("/data/abort"); err != nil {
		t.Fatal("abort marker removed after an unclean close")
	}
	// Power loss, then restart: the acknowledged message is there.
	cfg.FS = mem.CrashClone()
	s = mustOpen(t, cfg)
	defer s.Close()
	checkAcked(t, s, []ackedMsg{{"T", 0, 0, 0, []byte("before")}}, "after restart")
	checkConsistent(t, s, "after restart")
}

func TestNoSpaceOnCommitLogWrite(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	s := mustOpen(t, testConfig(efs))
	defer s.Close()
	put(t, s, newMsg("T", 0, "fits", nil))
	waitVisible(t, s, "T", 0, 1)
	efs.SetFreeBytes(100)
	r := s.PutMessage(context.Background(), newMsg("T", 0, strings.Repeat("x", 500), nil))
	if r.Status != PutDiskFull || !errors.Is(r.Err, ErrNoSpace) || !errors.Is(r.Err, syscall.ENOSPC) {
		t.Fatalf("ENOSPC: %v %v", r.Status, r.Err)
	}
	got, err := s.GetMessage("T", 0, 0, 32, 1<<20, nil)
	if err != nil || fmt.Sprint(bodies(got)) != "[fits]" {
		t.Fatalf("reads after ENOSPC: %v %v", bodies(got), err)
	}
	efs.SetFreeBytes(-1)
	m := newMsg("T", 0, "after", nil)
	put(t, s, m)
	if m.QueueOffset != 1 {
		t.Fatalf("put after space returned got queue offset %d, want 1", m.QueueOffset)
	}
}

func TestFaultsInQueueAndCheckpointWrites(t *testing.T) {
	for _, c := range []struct {
		name string
		rule vfs.Rule
	}{
		{"consumequeue write", vfs.Rule{Ops: vfs.OpWrite, Path: "/consumequeue/"}},
		{"consumequeue sync", vfs.Rule{Ops: vfs.OpSync, Path: "/consumequeue/"}},
		{"index write", vfs.Rule{Ops: vfs.OpWrite, Path: "/index/"}},
		{"index sync", vfs.Rule{Ops: vfs.OpSync, Path: "/index/"}},
		{"checkpoint write", vfs.Rule{Ops: vfs.OpWrite, Path: "checkpoint"}},
		{"checkpoint rename", vfs.Rule{Ops: vfs.OpRename, Path: "checkpoint"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			efs := vfs.NewErrorFS(mem)
			cfg := testConfig(efs)
			cfg.FlushDiskType = SyncFlush
			s := mustOpen(t, cfg)
			put(t, s, newMsg("T", 0, "a", map[string]string{"KEYS": "ka"}))
			waitVisible(t, s, "T", 0, 1)
			efs.Inject(c.rule)
			put(t, s, newMsg("T", 0, "b", map[string]string{"KEYS": "kb"})) // durable in the CommitLog: acknowledged
			deadline := time.Now().Add(10 * time.Second)
			for s.Err() == nil {
				if time.Now().After(deadline) {
					t.Fatal("fault did not make the store read-only")
				}
				time.Sleep(time.Millisecond)
			}
			if r := s.PutMessage(context.Background(), newMsg("T", 0, "c", nil)); r.Status != PutServiceNotAvailable {
				t.Fatalf("put after fault: %v", r.Status)
			}
			if r, err := s.GetMessage("T", 0, 0, 32, 1<<20, nil); err != nil || r.Status != Found {
				t.Fatalf("reads after fault: %v", err)
			}
			s.Close()
			cfg.FS = mem.CrashClone()
			s = mustOpen(t, cfg)
			defer s.Close()
			checkAcked(t, s, []ackedMsg{{"T", 0, 0, 0, []byte("a")}}, c.name)
			r, _ := s.GetMessage("T", 0, 1, 32, 1<<20, nil)
			if fmt.Sprint(bodies(r)) != "[b]" {
				t.Fatalf("acknowledged message after the fault: %v", bodies(r))
			}
			if offs, err := s.QueryByKey("T", "kb", 10, 0, 1<<62); err != nil || len(offs) != 1 {
				t.Fatalf("key of the message after the fault: %v %v", offs, err)
			}
			checkConsistent(t, s, c.name)
		})
	}
}

// openFourSegments opens a store on MemFS and fills about four CommitLog
// segments with 60 messages of 4,000 bytes to T/0, flushed. One consumer
// group has consumed them all and DiskPressureDelete is
// PressureDeleteConsumed, so that disk pressure may delete them young.
func openFourSegments(t *testing.T) (*Store, *vfs.MemFS) {
	t.Helper()
	mem := vfs.NewMem()
	cfg := testConfig(mem)
	cfg.Now = newFakeClock().Now
	cfg.DiskPressureDelete = PressureDeleteConsumed
	s := mustOpen(t, cfg)
	s.SetConsumerOffsets(func() ConsumerOffsets {
		return ConsumerOffsets{"T": {"G": {0: s.MaxOffset("T", 0)}}}
	})
	body := strings.Repeat("x", 4000)
	for range 60 {
		put(t, s, newMsg("T", 0, body, nil))
	}
	flushAll(t, s)
	return s, mem
}

func TestDiskWatermarks(t *testing.T) {
	s, mem := openFourSegments(t)
	defer s.Close()
	used := func() uint64 { total, free, _ := mem.DiskUsage("/data"); return total - free }

	// Above the hard limit: refused with a clear error, before the disk is full.
	total := used() * 100 / 95
	mem.SetCapacity(total)
	if _, err := s.checkDisk(); err != nil {
		t.Fatal(err)
	}
	r := s.PutMessage(context.Background(), newMsg("T", 0, "x", nil))
	if r.Status != PutDiskFull || !errors.Is(r.Err, ErrDiskFull) || !strings.Contains(r.Err.Error(), "%") {
		t.Fatalf("above the hard limit: %v %v", r.Status, r.Err)
	}
	// Pressure deletion (not the hour, not expired; consumed) removes the
	// oldest segments one at a time, re-measuring, until use is below
	// DiskMaxUsedSpaceRatio, and no more; then writes are accepted again.
	segsBefore := len(s.log.Segments())
	s.runRetentionOnce()
	deleted := segsBefore - len(s.log.Segments())
	if deleted == 0 {
		t.Fatal("no segment deleted above DiskMaxUsedSpaceRatio")
	}
	after := used()
	if after*100 >= total*uint64(s.cfg.DiskMaxUsedSpaceRatio) {
		t.Fatalf("use %d of %d still at or above %d%% after deleting %d segments", after, total, s.cfg.DiskMaxUsedSpaceRatio, deleted)
	}
	if (after+uint64(s.cfg.CommitLogSegmentBytes))*100 < total*uint64(s.cfg.DiskMaxUsedSpaceRatio) {
		t.Fatalf("deleted %d segments: one fewer would have been enough (use %d of %d)", deleted, after, total)
	}
	put(t, s, newMsg("T", 0, "x", nil))
	lo := s.MinOffset("T", 0)
	if lo == 0 {
		t.Fatal("consume queue min offset did not advance")
	}
	r2, _ := s.GetMessage("T", 0, lo, 1, 1<<20, nil)
	if r2.Status != Found {
		t.Fatalf("at new min: %v", r2.Status)
	}
	if st := s.Stats(); st.UnconsumedDeleted != 0 {
		t.Fatalf("consumed segments counted as unconsumed: %d", st.UnconsumedDeleted)
	}
}

// TestDiskFullResumesWithoutRetentionRound: while the store refuses puts
// above the hard limit, a refused put re-checks the disk (at most every
// diskFullRecheck), so writing resumes soon after space returns instead of
// at the next retention round (an hour away here). Refused puts write
// nothing, so nothing else would re-check.
func TestDiskFullResumesWithoutRetentionRound(t *testing.T) {
	mem := vfs.NewMem()
	cfg := testConfig(mem) // RetentionCheckInterval: an hour
	s := mustOpen(t, cfg)  // after the retention goroutine's check at start
	defer s.Close()
	put(t, s, newMsg("T", 0, strings.Repeat("x", 4000), nil))
	flushAll(t, s)
	used := func() uint64 { total, free, _ := mem.DiskUsage("/data"); return total - free }
	mem.SetCapacity(used() * 100 / 99)
	if _, err := s.checkDisk(); err != nil {
		t.Fatal(err)
	}
	r := s.PutMessage(context.Background(), newMsg("T", 0, "refused", nil))
	if r.Status != PutDiskFull || !errors.Is(r.Err, ErrDiskFull) {
		t.Fatalf("above the hard limit: %v %v", r.Status, r.Err)
	}
	mem.SetCapacity(used() * 100 / 50)
	waitUntil(t, "a put accepted after space returned", func() bool {
		r := s.PutMessage(context.Background(), newMsg("T", 0, "accepted", nil))
		if r.Status != PutOK && r.Status != PutDiskFull {
			t.Fatalf("put: %v %v", r.Status, r.Err)
		}
		return r.Status == PutOK
	})
}

func TestRetentionByAgeAndHour(t *testing.T) {
	clock := newFakeClock() // 10:00
	cfg := testConfig(vfs.NewMem())
	cfg.Now = clock.Now
	cfg.DeleteWhen = "03;04"
	s := mustOpen(t, cfg)
	defer s.Close()
	body := strings.Repeat("x", 4000)
	for range 40 {
		put(t, s, newMsg("T", 0, body, nil))
	}
	clock.Add(80 * time.Hour) // 18:00, three days later: old segments expired
	for range 20 {
		put(t, s, newMsg("T", 0, body, nil))
	}
	flushAll(t, s)
	nsegs := len(s.log.Segments())
	s.runRetentionOnce()
	if len(s.log.Segments()) != nsegs {
		t.Fatal("deleted outside DeleteWhen")
	}
	clock.Set(time.Date(clock.Now().Year(), clock.Now().Month(), clock.Now().Day()+1, 3, 10, 0, 0, time.Local))
	s.runRetentionOnce()
	segs := s.log.Segments()
	if len(segs) >= nsegs || len(segs) < 2 {
		t.Fatalf("segments %d -> %d", nsegs, len(segs))
	}
	// What is left starts with the first record written after the clock jump.
	first, err := s.log.ReadRecord(segs[0].Base, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = first
	if lo := s.MinOffset("T", 0); lo == 0 || lo > 40 {
		t.Fatalf("min offset %d after retention", lo)
	}
}
