package commitlog

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrFlushTimeout is returned by WaitFlushed when the flush did not cover
// the offset in time. The data may still become durable later.
var ErrFlushTimeout = errors.New("commitlog: flush did not complete in time")

// flushRound is one generation of waiters: done is closed after the flush
// that ends the round, and waiters re-check the flushed offset.
type flushRound struct{ done chan struct{} }

func newRound() *flushRound { return &flushRound{done: make(chan struct{})} }

func (l *Log) currentRound() *flushRound {
	l.roundMu.Lock()
	defer l.roundMu.Unlock()
	return l.round
}

// wakeWaiters ends the current round. Callers must publish the new flushed
// offset or failure before calling it.
func (l *Log) wakeWaiters() {
	l.roundMu.Lock()
	old := l.round
	l.round = newRound()
	l.roundMu.Unlock()
	close(old.done)
}

// Flush makes every byte written so far durable (fdatasync of each segment
// holding unflushed bytes) and wakes the waiters it covered. A failure fails
// the log.
func (l *Log) Flush() error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if err := l.Err(); err != nil {
		// An AfterFlush waiter that registered while the log failed asks
		// for this flush: the acknowledger answers it with the failure.
		l.flushEnded()
		return err
	}
	w := l.written.Load()
	f := l.flushed.Load()
	if w > f {
		start := time.Now()
		for _, s := range l.segmentsOverlapping(f, w) {
			if err := s.f.Sync(); err != nil {
				return l.fail(fmt.Errorf("commitlog: fdatasync %s: %w", s.path, err))
			}
		}
		l.advanceFlushed(w)
		l.notify()
		l.noteFlushSize(w - f)
		l.afterFlushCache(w)
		if l.cfg.OnFlush != nil {
			l.cfg.OnFlush(time.Since(start), w-f)
		}
	}
	l.wakeWaiters()
	l.flushEnded()
	return nil
}

func (l *Log) advanceFlushed(w int64) {
	for {
		f := l.flushed.Load()
		if w <= f || l.flushed.CompareAndSwap(f, w) {
			return
		}
	}
}

func (l *Log) segmentsOverlapping(from, to int64) []*segment {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	var out []*segment
	for _, s := range l.segs {
		if s.base < to && s.base+l.cfg.SegmentBytes > from {
			out = append(out, s)
		}
	}
	return out
}

// RequestFlush asks the flusher goroutine for a flush soon.
func (l *Log) RequestFlush() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// RunFlusher runs the flusher until stop is closed: it flushes when a
// waiter asks (RequestFlush, WaitFlushed) and every interval (if > 0).
// Exactly one flusher may run.
func (l *Log) RunFlusher(stop <-chan struct{}, interval time.Duration) {
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-stop:
			return
		case <-l.kick:
			if l.cfg.BeforeFlush != nil {
				l.cfg.BeforeFlush()
			}
		case <-tick:
		}
		_ = l.Flush() // a failure is recorded in the log and reported to waiters
	}
}

// WaitFlushed waits until the flushed offset reaches end (group commit: a
// single fdatasync covers every waiter). It returns nil only if a successful
// fdatasync covered end; an error wrapping ErrFailed if the log failed
// first, ErrFlushTimeout after timeout (if > 0), or the context's error.
// A flusher must be running (RunFlusher).
func (l *Log) WaitFlushed(ctx context.Context, end int64, timeout time.Duration) error {
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	for {
		if l.flushed.Load() >= end {
			return nil
		}
		if err := l.Err(); err != nil {
			return err
		}
		r := l.currentRound()
		if l.flushed.Load() >= end {
			return nil
		}
		if err := l.Err(); err != nil {
			return err
		}
		l.RequestFlush()
		select {
		case <-r.done:
		case <-ctx.Done():
			return fmt.Errorf("commitlog: waiting for flush of offset %d: %w", end, ctx.Err())
		case <-deadline:
			return fmt.Errorf("commitlog: offset %d not flushed after %v: %w", end, timeout, ErrFlushTimeout)
		}
	}
}
