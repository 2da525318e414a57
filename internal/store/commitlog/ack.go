package commitlog

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
// tail. AfterFlush instead registers a callback, and one goroutine (the
// acknowledger, RunAcknowledger) calls back every waiter a flush covered,
// in one pass, right after the flush.

// flushCallback is one AfterFlush registration.
type flushCallback struct {
	end      int64
	deadline time.Time // zero: none
	fn       func(error)
	err      error // set when it is due: why it ends
}

// acks is the acknowledger's state.
type acks struct {
	mu      sync.Mutex
	waiting []flushCallback // in registration order
	n       atomic.Int32    // len(waiting), read without mu
	armed   time.Time       // the deadline the acknowledger's timer is set to (zero: none)
	closed  bool
	kick    chan struct{} // one pending wake-up for the acknowledger
}

// AfterFlush calls fn exactly once: with nil after a successful fdatasync
// covered end; with an error wrapping ErrFailed if the log fails first,
// ErrFlushTimeout after timeout (if > 0), or ErrClosedUnflushed if the log
// is closed first. It never blocks: fn runs on the caller's goroutine when
// the outcome is already known, else on the acknowledger's goroutine
// (RunAcknowledger must run, and a flusher), possibly before AfterFlush
// returns. fn must not block: every waiter of the log is called back by
// that one goroutine.
func (l *Log) AfterFlush(end int64, timeout time.Duration, fn func(error)) {
	if l.flushed.Load() >= end {
		fn(nil)
		return
	}
	if err := l.Err(); err != nil {
		fn(err)
		return
	}
	cb := flushCallback{end: end, fn: fn}
	if timeout > 0 {
		cb.deadline = time.Now().Add(timeout)
	}
	a := &l.acks
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		fn(l.unflushedAtClose(end))
		return
	}
	a.waiting = append(a.waiting, cb)
	a.n.Store(int32(len(a.waiting)))
	earlier := !cb.deadline.IsZero() && (a.armed.IsZero() || cb.deadline.Before(a.armed))
	a.mu.Unlock()
	if earlier {
		l.kickAcknowledger() // re-arm its timer
	}
	// A flush that ends after this point calls the acknowledger, and this
	// makes sure one does (an in-progress flush may have checked the
	// waiters before this one was added).
	l.RequestFlush()
}

// flushEnded wakes the acknowledger after a flush or the log's failure,
// if anyone waits.
func (l *Log) flushEnded() {
	if l.acks.n.Load() > 0 {
		l.kickAcknowledger()
	}
}

func (l *Log) kickAcknowledger() {
	select {
	case l.acks.kick <- struct{}{}:
	default:
	}
}

// RunAcknowledger calls back the AfterFlush waiters that a flush covered,
// the log's failure ended or whose timeout passed, until stop is closed.
// Exactly one may run. Waiters left when it stops are called back by Close.
func (l *Log) RunAcknowledger(stop <-chan struct{}) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	var due []flushCallback
	for {
		select {
		case <-stop:
			return
		case <-l.acks.kick:
		case <-t.C:
		}
		var next time.Time
		due, next = l.takeDue(due[:0], time.Now())
		callBack(due)
		clear(due)
		if !next.IsZero() {
			t.Reset(time.Until(next))
		} else {
			t.Stop()
		}
	}
}

// takeDue moves the waiters whose outcome is known (at now) from the
// waiting list to due, in registration order, and returns the earliest
// deadline among those left (zero if none), which it records as armed.
func (l *Log) takeDue(due []flushCallback, now time.Time) ([]flushCallback, time.Time) {
	flushed, failure := l.flushed.Load(), l.Err()
	a := &l.acks
	a.mu.Lock()
	defer a.mu.Unlock()
	var next time.Time
	kept := a.waiting[:0]
	for _, cb := range a.waiting {
		switch {
		case cb.end <= flushed:
		case failure != nil:
			cb.err = failure
		case !cb.deadline.IsZero() && !now.Before(cb.deadline):
			cb.err = fmt.Errorf("commitlog: offset %d not flushed in time: %w", cb.end, ErrFlushTimeout)
		default:
			if !cb.deadline.IsZero() && (next.IsZero() || cb.deadline.Before(next)) {
				next = cb.deadline
			}
			kept = append(kept, cb)
			continue
		}
		due = append(due, cb)
	}
	clear(a.waiting[len(kept):])
	a.waiting = kept
	a.n.Store(int32(len(kept)))
	a.armed = next
	return due, next
}

func callBack(due []flushCallback) {
	for _, cb := range due {
		cb.fn(cb.err)
	}
}

// finishAcks calls back every waiter left when the log closes: nil for
// those the last flush covered, an error for the others. Later AfterFlush
// calls are answered at once.
func (l *Log) finishAcks() {
	a := &l.acks
	a.mu.Lock()
	a.closed = true
	left := a.waiting
	a.waiting = nil
	a.n.Store(0)
	a.mu.Unlock()
	for i := range left {
		left[i].err = l.unflushedAtClose(left[i].end)
	}
	callBack(left)
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
