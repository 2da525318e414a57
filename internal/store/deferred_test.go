package store

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// deferredPut records the one call of a PutMessagesDeferred callback and
// what the store had made durable at that moment.
type deferredPut struct {
	calls   atomic.Int32
	res     atomic.Pointer[PutResult]
	flushed atomic.Int64
	done    chan struct{}
}

func putDeferred(t *testing.T, s *Store, ms ...*message.Message) (*deferredPut, PutResult, bool) {
	t.Helper()
	d := &deferredPut{done: make(chan struct{})}
	res, pending := s.PutMessagesDeferred(context.Background(), ms, func(r PutResult) {
		d.flushed.Store(s.log.FlushedOffset())
		d.res.Store(&r)
		if d.calls.Add(1) == 1 {
			close(d.done)
		}
	})
	return d, res, pending
}

func (d *deferredPut) wait(t *testing.T) PutResult {
	t.Helper()
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		t.Fatal("deferred put not answered within 10s")
	}
	return *d.res.Load()
}

func TestPutMessagesDeferredSyncFlush(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	ms := []*message.Message{newMsg("T", 0, "a", nil), newMsg("T", 0, "b", nil)}
	d, _, pending := putDeferred(t, s, ms...)
	if !pending {
		t.Fatal("a SYNC_FLUSH put was answered before any flush")
	}
	if r := d.wait(t); r.Status != PutOK {
		t.Fatalf("status %v %v", r.Status, r.Err)
	}
	end := ms[1].PhysOffset + int64(ms[1].StoredSize()) + commitlog.TrailerBytes
	if d.flushed.Load() < end {
		t.Fatalf("acknowledged at flushed offset %d, before the batch's end %d", d.flushed.Load(), end)
	}
	if ms[0].QueueOffset != 0 || ms[1].QueueOffset != 1 {
		t.Fatalf("queue offsets %d %d", ms[0].QueueOffset, ms[1].QueueOffset)
	}
	waitVisible(t, s, "T", 0, 2)
	if n := d.calls.Load(); n != 1 {
		t.Fatalf("called back %d times", n)
	}
}

func TestPutMessagesDeferredAnswersAtOnce(t *testing.T) {
	async := mustOpen(t, testConfig(vfs.NewMem()))
	defer async.Close()
	d, r, pending := putDeferred(t, async, newMsg("T", 0, "a", nil))
	if pending || r.Status != PutOK {
		t.Fatalf("ASYNC_FLUSH: pending %v, status %v", pending, r.Status)
	}

	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	noWait := newMsg("T", 0, "b", map[string]string{message.PropWaitStoreMsgOK: "false"})
	d2, r, pending := putDeferred(t, s, noWait)
	if pending || r.Status != PutOK {
		t.Fatalf("WAIT=false: pending %v, status %v", pending, r.Status)
	}
	big := newMsg("T", 0, string(make([]byte, cfg.MaxMessageBytes+1)), nil)
	d3, r, pending := putDeferred(t, s, big)
	if pending || r.Status != PutMessageIllegal {
		t.Fatalf("oversized: pending %v, status %v", pending, r.Status)
	}
	for _, d := range []*deferredPut{d, d2, d3} {
		if d.calls.Load() != 0 {
			t.Fatal("done was called for a result returned at once")
		}
	}
}

func TestPutMessagesDeferredTimeoutThenDurable(t *testing.T) {
	s, gfs := openSyncGated(t, 20*time.Millisecond)
	defer s.Close()
	gfs.close()
	d, _, pending := putDeferred(t, s, newMsg("T", 0, "slow", nil))
	if !pending {
		t.Fatal("not pending")
	}
	if r := d.wait(t); r.Status != PutFlushDiskTimeout || !errors.Is(r.Err, commitlog.ErrFlushTimeout) {
		t.Fatalf("blocked flush: %v %v", r.Status, r.Err)
	}
	if gfs.blocked.Load() == 0 {
		t.Fatal("the flush was not blocked: the timeout proved nothing")
	}
	gfs.open()
	waitVisible(t, s, "T", 0, 1)
	if n := d.calls.Load(); n != 1 {
		t.Fatalf("called back %d times", n)
	}
}

func TestPutMessagesDeferredFailedFsync(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	cfg := testConfig(efs)
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	efs.InjectSyncError("commitlog")
	d, _, pending := putDeferred(t, s, newMsg("T", 0, "lost", nil))
	if !pending {
		t.Fatal("not pending")
	}
	if r := d.wait(t); r.Status != PutServiceNotAvailable || !errors.Is(r.Err, ErrReadOnly) {
		t.Fatalf("after a failed fsync: %v %v", r.Status, r.Err)
	}
}

func TestPutMessagesDeferredAnsweredByClose(t *testing.T) {
	s, gfs := openSyncGated(t, time.Hour)
	gfs.close()
	d, _, _ := putDeferred(t, s, newMsg("T", 0, "at close", nil))
	waitUntil(t, "the flush to block", func() bool { return gfs.blocked.Load() > 0 })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	gfs.open()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if r := d.wait(t); r.Status != PutOK {
		t.Fatalf("flushed by the close: %v %v", r.Status, r.Err)
	}
}
