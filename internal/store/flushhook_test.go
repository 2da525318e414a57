package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// flushLog records OnFlush calls.
type flushLog struct {
	mu    sync.Mutex
	calls int
	bytes int64
	bad   bool // a call with bytes <= 0 or a negative duration
}

func (f *flushLog) on(d time.Duration, n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	f.bytes += n
	f.bad = f.bad || n <= 0 || d < 0
}

func (f *flushLog) get() (int, int64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.bytes, f.bad
}

func TestOnFlushReportsEverySyncedByte(t *testing.T) {
	var fl flushLog
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	cfg.OnFlush = fl.on
	s := mustOpen(t, cfg)
	defer s.Close()
	for i := 0; i < 5; i++ {
		put(t, s, newMsg("T", 0, "hello", nil))
	}
	calls, n, bad := fl.get()
	if flushed := s.Stats().FlushedOffset; calls == 0 || bad || n != flushed {
		t.Errorf("OnFlush: %d calls, %d bytes (bad %v); flushed offset %d", calls, n, bad, flushed)
	}
}

func TestOnFlushNotCalledForAFailedSync(t *testing.T) {
	var fl flushLog
	efs := vfs.NewErrorFS(vfs.NewMem())
	cfg := testConfig(efs)
	cfg.FlushDiskType = SyncFlush
	cfg.OnFlush = fl.on
	s := mustOpen(t, cfg)
	defer s.Close()
	put(t, s, newMsg("T", 0, "ok", nil))
	before, _, _ := fl.get()
	efs.InjectSyncError("commitlog")
	if r := s.PutMessage(context.Background(), newMsg("T", 0, "lost", nil)); r.Status == PutOK {
		t.Fatalf("put acknowledged after a failed fsync: %v", r.Status)
	}
	if after, _, _ := fl.get(); after != before {
		t.Errorf("OnFlush called %d times for a failed sync", after-before)
	}
}
