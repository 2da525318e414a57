package commitlog

import (
	"context"
	"fmt"
	"time"

	"github.com/keelmq/keel/internal/store/watermark"
)

// ErrFlushTimeout is wrapped by the error of WaitFlushed and AfterFlush
// when the flush did not cover the offset in time. The data may still
// become durable later. It is the watermark package's timeout.
var ErrFlushTimeout = watermark.ErrTimeout

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
		// The mark first: once the watermark moves, waiters are answered,
		// and a record acknowledged must lie below the mark a process kill
		// leaves in the page cache.
		if err := l.advanceMark(w); err != nil {
			return l.fail(err)
		}
		l.advanceFlushed(w)
		l.notify()
		l.noteFlushSize(w - f)
		l.afterFlushCache(w)
		if l.cfg.OnFlush != nil {
			l.cfg.OnFlush(time.Since(start), w-f)
		}
	}
	l.flushEnded()
	return nil
}

func (l *Log) advanceFlushed(w int64) { l.flushed.Advance(w) }

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
// A flusher and the acknowledger must be running.
func (l *Log) WaitFlushed(ctx context.Context, end int64, timeout time.Duration) error {
	return l.flushed.Wait(ctx, end, timeout)
}
