package commitlog

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// runAckers runs a flusher (unless noFlusher) and the acknowledger until
// the test ends.
func runAckers(t *testing.T, l *Log, noFlusher bool) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.RunAcknowledger(stop) }()
	if !noFlusher {
		wg.Add(1)
		go func() { defer wg.Done(); l.RunFlusher(stop, 0) }()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// outcome records the one call of an AfterFlush callback.
type outcome struct {
	calls   atomic.Int32
	flushed atomic.Int64 // the log's flushed offset when it was called
	err     atomic.Pointer[error]
	done    chan struct{}
}

func newOutcome() *outcome { return &outcome{done: make(chan struct{})} }

func (o *outcome) fn(l *Log) func(error) {
	return func(err error) {
		o.flushed.Store(l.FlushedOffset())
		o.err.Store(&err)
		if o.calls.Add(1) == 1 {
			close(o.done)
		}
	}
}

func (o *outcome) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-o.done:
	case <-time.After(10 * time.Second):
		t.Fatal("callback not called within 10s")
	}
	return *o.err.Load()
}

func TestAfterFlushCallsBackOnceFlushed(t *testing.T) {
	l, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer l.Close()
	runAckers(t, l, false)

	const writers, perWriter = 8, 50
	var mu sync.Mutex // Append has a single writer
	var outs []*outcome
	var ends []int64
	var wg sync.WaitGroup
	var outsMu sync.Mutex
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				mu.Lock()
				end, err := l.Append([][]byte{rec(60, byte(w*perWriter+i))}, nil)
				mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				o := newOutcome()
				outsMu.Lock()
				outs, ends = append(outs, o), append(ends, end)
				outsMu.Unlock()
				l.AfterFlush(end, 10*time.Second, o.fn(l))
			}
		}()
	}
	wg.Wait()
	for i, o := range outs {
		if err := o.wait(t); err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
		if got := o.flushed.Load(); got < ends[i] {
			t.Fatalf("waiter for %d called back at flushed offset %d", ends[i], got)
		}
	}
	// Called exactly once each (a late second call would show here).
	l.Flush()
	for i, o := range outs {
		if n := o.calls.Load(); n != 1 {
			t.Fatalf("waiter %d called %d times", i, n)
		}
	}
}

func TestAfterFlushAlreadyFlushedCallsAtOnce(t *testing.T) {
	l, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer l.Close()
	end := appendAll(t, l, rec(100, 1))[0].phys + 100 + TrailerBytes
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	o := newOutcome()
	l.AfterFlush(end, 0, o.fn(l)) // no acknowledger runs: must be inline
	if o.calls.Load() != 1 || *o.err.Load() != nil {
		t.Fatalf("calls %d, err %v", o.calls.Load(), o.err.Load())
	}
}

func TestAfterFlushTimeout(t *testing.T) {
	l, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer l.Close()
	runAckers(t, l, true) // no flusher: nothing completes
	end, _ := l.Append([][]byte{rec(100, 1)}, nil)
	long, short := newOutcome(), newOutcome()
	l.AfterFlush(end, time.Hour, long.fn(l))
	start := time.Now()
	l.AfterFlush(end, 20*time.Millisecond, short.fn(l)) // an earlier deadline re-arms the timer
	if err := short.wait(t); !errors.Is(err, ErrFlushTimeout) {
		t.Fatalf("short timeout: %v", err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("timed out after %v, before its 20ms", d)
	}
	if long.calls.Load() != 0 {
		t.Fatal("the waiter with an hour left was called back")
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := long.wait(t); err != nil {
		t.Fatalf("after the flush: %v", err)
	}
}

func TestAfterFlushFailure(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	runAckers(t, l, false)
	efs.InjectSyncError("commitlog")
	end, err := l.Append([][]byte{rec(100, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := newOutcome()
	l.AfterFlush(end, 10*time.Second, o.fn(l))
	if err := o.wait(t); !errors.Is(err, ErrFailed) {
		t.Fatalf("after a failed fsync: %v", err)
	}
	if o.flushed.Load() >= end {
		t.Fatal("flushed offset covers the record whose fsync failed")
	}
	late := newOutcome()
	l.AfterFlush(end, 0, late.fn(l)) // a failed log answers at once
	if late.calls.Load() != 1 || !errors.Is(*late.err.Load(), ErrFailed) {
		t.Fatalf("registered after the failure: calls %d", late.calls.Load())
	}
}

func TestAfterFlushClose(t *testing.T) {
	l, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	first, _ := l.Append([][]byte{rec(100, 1)}, nil)
	covered, uncovered := newOutcome(), newOutcome()
	l.AfterFlush(first, 0, covered.fn(l))
	if err := l.Flush(); err != nil { // no acknowledger: covered stays registered
		t.Fatal(err)
	}
	second, _ := l.Append([][]byte{rec(100, 2)}, nil)
	l.AfterFlush(second, 0, uncovered.fn(l))
	if covered.calls.Load() != 0 || uncovered.calls.Load() != 0 {
		t.Fatal("called back without an acknowledger")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := covered.wait(t); err != nil {
		t.Fatalf("flushed before close: %v", err)
	}
	if err := uncovered.wait(t); !errors.Is(err, ErrClosedUnflushed) {
		t.Fatalf("not flushed before close: %v", err)
	}
	after := newOutcome()
	l.AfterFlush(second, 0, after.fn(l))
	if after.calls.Load() != 1 || !errors.Is(*after.err.Load(), ErrClosedUnflushed) {
		t.Fatal("registration on a closed log not answered at once")
	}
}

// TestAfterFlushRegisteredAsTheLogFails: a waiter registered after the log
// failed is answered with the failure (not left to its timeout). The race
// of a registration with the failure itself is the watermark package's
// (TestFailRacesRegistrations there): the flushed watermark checks and
// records the failure under one lock.
func TestAfterFlushRegisteredAsTheLogFails(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	runAckers(t, l, true) // the test calls Flush itself
	end, err := l.Append([][]byte{rec(100, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	efs.InjectSyncError("commitlog")
	if err := l.Flush(); !errors.Is(err, ErrFailed) {
		t.Fatalf("flush: %v", err)
	}
	o := newOutcome()
	l.AfterFlush(end, 0, o.fn(l))
	if err := o.wait(t); !errors.Is(err, ErrFailed) {
		t.Fatalf("answered with %v", err)
	}
}
