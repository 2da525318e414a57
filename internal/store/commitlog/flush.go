package commitlog

import (
	"context"
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
			if err := l.syncSegment(s, ""); err != nil {
				return err
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
// After a whole interval without a write, with everything flushed, it
// parks, its ticker stopped, until a waiter asks or a write comes; a write
// is then flushed at the moment the ticker would have fired had it kept
// running (the same periodic flushes as a ticker that never stops). While
// writes keep coming it never parks: they pay one atomic load each.
// Exactly one flusher may run.
func (l *Log) RunFlusher(stop <-chan struct{}, interval time.Duration) {
	var (
		t     *time.Ticker
		tick  <-chan time.Time
		phase time.Time // a moment the ticker fired (or started)
	)
	if interval > 0 {
		t = time.NewTicker(interval)
		defer t.Stop()
		tick, phase = t.C, time.Now()
	}
	quiet, seen := false, l.WrittenOffset() // quiet: no write during the last interval
	for {
		asked := false
		if t != nil && quiet && l.parkFlusher() {
			t.Stop()
			asked = l.parkedFlusherWait(stop, interval, phase)
			l.flusherParked.Store(false)
			if l.stopped(stop) {
				return
			}
			t.Reset(interval)
			phase = time.Now()
			quiet, seen = false, l.WrittenOffset()
		} else {
			select {
			case <-stop:
				return
			case <-l.kick:
				asked = true
			case now := <-tick:
				phase = now
				w := l.WrittenOffset()
				quiet, seen = w == seen, w
			}
		}
		if asked && l.cfg.BeforeFlush != nil {
			l.cfg.BeforeFlush()
		}
		_ = l.Flush() // a failure is recorded in the log and reported to waiters
	}
}

// parkedFlusherWait waits, parked, for a waiter's request (true), or for a
// write and then the next moment interval after phase, or for stop.
func (l *Log) parkedFlusherWait(stop <-chan struct{}, interval time.Duration, phase time.Time) bool {
	select {
	case <-stop:
		return false
	case <-l.kick:
		return true
	case <-l.flusherWake:
	}
	due := time.NewTimer(interval - time.Since(phase)%interval)
	defer due.Stop()
	select {
	case <-stop:
	case <-l.kick:
		return true
	case <-due.C:
	}
	return false
}

func (l *Log) stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// parkFlusher reports whether the flusher may park: everything written is
// flushed. It sets flusherParked first, so that a write racing with the
// check either is seen here or sees the flag and wakes the flusher (write).
func (l *Log) parkFlusher() bool {
	l.flusherParked.Store(true)
	if l.FlushedOffset() >= l.WrittenOffset() {
		return true
	}
	l.flusherParked.Store(false)
	return false
}

// wakeFlusher wakes a parked flusher after a write.
func (l *Log) wakeFlusher() {
	if l.flusherParked.Load() {
		select {
		case l.flusherWake <- struct{}{}:
		default:
		}
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
