package commitlog

import (
	"errors"
	"fmt"
	"time"
)

// ErrClosedUnflushed is passed to an AfterFlush callback whose offset no
// flush covered before the log was closed (the closing flush failed or
// never ran). The data may or may not be durable.
var ErrClosedUnflushed = errors.New("commitlog: closed before a flush covered the offset")

// Callback waiters. WaitFlushed parks one goroutine per waiter, and a group
// commit that covers many waiters wakes all of them at once; the broker's
// send path had one handler goroutine per message doing exactly that, and
// the burst of wake-ups after every fdatasync was the end-to-end latency
// tail. AfterFlush instead registers a callback on the flushed watermark,
// and one goroutine (the acknowledger, RunAcknowledger) calls back every
// waiter a flush covered, in one pass, right after the flush, while the
// flusher goes on to the next fdatasync.

// AfterFlush calls fn exactly once: with nil after a successful fdatasync
// covered end; with an error wrapping ErrFailed if the log fails first,
// ErrFlushTimeout after timeout (if > 0), or ErrClosedUnflushed if the log
// is closed first. It never blocks: fn runs on the caller's goroutine when
// the outcome is already known, else on the acknowledger's goroutine
// (RunAcknowledger must run, and a flusher) or a timer's, possibly before
// AfterFlush returns. fn must not block: every waiter of the log is called
// back by that one goroutine. It is Flushed().Notify.
func (l *Log) AfterFlush(end int64, timeout time.Duration, fn func(error)) {
	l.flushed.Notify(end, timeout, fn)
}

// flushEnded wakes the acknowledger after a flush, if anyone waits or
// AfterFlushed is set.
func (l *Log) flushEnded() {
	if l.flushed.Waiting() || l.cfg.AfterFlushed != nil {
		select {
		case l.ackKick <- struct{}{}:
		default:
		}
	}
}

// RunAcknowledger calls back the waiters of the flushed watermark that a
// flush covered, then AfterFlushed, until stop is closed. Exactly one may
// run. Waiters left when it stops are called back by Close; a failure and
// timeouts are answered without it.
func (l *Log) RunAcknowledger(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-l.ackKick:
			l.flushed.Release()
			if l.cfg.AfterFlushed != nil {
				l.cfg.AfterFlushed()
			}
		}
	}
}

// finishAcks calls back every waiter left when the log closes: nil for
// those the last flush covered, an error for the others. Later waiters are
// answered at once.
func (l *Log) finishAcks() {
	l.flushed.Close(l.unflushedAtClose)
	l.written.Close(func(end int64) error {
		if l.written.Load() >= end {
			return nil
		}
		return fmt.Errorf("commitlog: closed before offset %d was written", end)
	})
}

// unflushedAtClose is the outcome of a waiter for end on a closed log.
func (l *Log) unflushedAtClose(end int64) error {
	if l.flushed.Load() >= end {
		return nil
	}
	if err := l.Err(); err != nil {
		return err
	}
	return fmt.Errorf("commitlog: offset %d: %w", end, ErrClosedUnflushed)
}
