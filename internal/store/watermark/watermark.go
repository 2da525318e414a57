// Package watermark is one CommitLog offset that only moves forward, with
// waiters: the primitive behind the store's named watermarks (written,
// flushed, replicated, visible; see package store).
//
// A Mark holds an offset. Whoever owns it (the CommitLog writer, the
// flusher, a replication service, the dispatcher) moves it with Advance
// and then calls Release, which calls back every waiter whose offset it
// reached. A waiter is either a callback (Notify: costs no goroutine, for
// replies sent later from another goroutine) or a blocked goroutine (Wait,
// with a context). Waiters may have a timeout; a Mark can fail (every
// waiter, present and future, gets the error) and be closed.
//
// Concurrency: all methods are safe for concurrent use. Callbacks run on
// the goroutine that calls Release (or Fail, Close), on the registering
// goroutine when the outcome is already known, or, for a timeout, on the
// goroutine of a timer; they must not block and must not call Release or
// Fail of the same Mark (they may register on it, or use another). Releases
// are serialized, and the callbacks of one run in registration order.
//
// Advance moves the offset without the waiters' lock, and Release skips its
// scan while no waiter is counted; so a waiter looks at the offset once
// more after it is counted. Without that second look, a waiter that checked
// just before a move and was counted just after Release looked would wait
// for the next move or its timeout (an idle Kafka acks=all producer was
// answered after 10 s).
package watermark

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTimeout is wrapped by the error of a waiter whose timeout passed
// before the Mark reached its offset.
var ErrTimeout = errors.New("watermark: offset not reached in time")

// Mark is a monotone offset with waiters. Create it with New.
type Mark struct {
	name   string
	demand func() // called after a waiter registers; may be nil

	v atomic.Int64
	n atomic.Int32 // len(waiting), read without mu

	// relMu serializes Release (the owner's goroutine and the timer's),
	// so callbacks run in order and the due list is reused.
	relMu sync.Mutex
	due   []waiter // guarded by relMu

	mu      sync.Mutex
	waiting []waiter // in registration order; guarded by mu
	failure error    // sticky; guarded by mu
	closed  func(off int64) error
	timer   *time.Timer
	armed   time.Time // the deadline timer is set to (zero: none)
}

type waiter struct {
	off      int64
	deadline time.Time // zero: none
	timeout  time.Duration
	fn       func(error)
	id       uint64 // for Wait's removal; 0 for Notify
	err      error  // the outcome, once due
}

var waitIDs atomic.Uint64

// New returns a Mark at 0. name appears in its errors; demand, if set, is
// called (without locks) after a waiter registered for an offset not yet
// reached, to ask the owner to move the Mark (the CommitLog's flushed
// Mark asks for a flush). demand must not block.
func New(name string, demand func()) *Mark {
	return &Mark{name: name, demand: demand}
}

// Load returns the offset.
func (m *Mark) Load() int64 { return m.v.Load() }

// Store sets the offset (recovery, or a jump to a segment end). Callers
// that may have waiters call Release afterwards.
func (m *Mark) Store(v int64) { m.v.Store(v) }

// Advance moves the offset to v if v is ahead, and reports whether there
// are waiters (the caller then calls Release, now or soon from the
// goroutine that answers them).
func (m *Mark) Advance(v int64) bool {
	for {
		cur := m.v.Load()
		if v <= cur || m.v.CompareAndSwap(cur, v) {
			break
		}
	}
	return m.n.Load() > 0
}

// Waiting reports whether any waiter is registered.
func (m *Mark) Waiting() bool { return m.n.Load() > 0 }

// Notify calls fn exactly once: with nil when the Mark reaches off; with
// the failure if the Mark fails first; with an error wrapping ErrTimeout
// after timeout (if > 0); with the Close outcome if the Mark is closed
// first. It never blocks; fn runs at once on the caller's goroutine when
// the outcome is known, else later (see the package documentation).
func (m *Mark) Notify(off int64, timeout time.Duration, fn func(error)) {
	m.add(waiter{off: off, timeout: timeout, fn: fn})
}

// Wait blocks until the Mark reaches off and returns nil; or returns the
// failure, an error wrapping ErrTimeout after timeout (if > 0), the Close
// outcome, or the context's error.
func (m *Mark) Wait(ctx context.Context, off int64, timeout time.Duration) error {
	if m.v.Load() >= off {
		return nil
	}
	done := make(chan error, 1)
	id := waitIDs.Add(1)
	m.add(waiter{off: off, timeout: timeout, fn: func(err error) { done <- err }, id: id})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		m.remove(id)
		return fmt.Errorf("watermark: waiting for %s offset %d: %w", m.name, off, ctx.Err())
	}
}

func (m *Mark) add(w waiter) {
	if m.v.Load() >= w.off {
		w.fn(nil)
		return
	}
	m.mu.Lock()
	switch {
	case m.v.Load() >= w.off:
		m.mu.Unlock()
		w.fn(nil)
		return
	case m.failure != nil:
		err := m.failure
		m.mu.Unlock()
		w.fn(err)
		return
	case m.closed != nil:
		done := m.closed
		m.mu.Unlock()
		w.fn(done(w.off))
		return
	}
	if w.timeout > 0 {
		w.deadline = time.Now().Add(w.timeout)
		if m.armed.IsZero() || w.deadline.Before(m.armed) {
			m.armLocked(w.deadline)
		}
	}
	m.waiting = append(m.waiting, w)
	m.n.Store(int32(len(m.waiting)))
	// Advance does not take mu, and Release skips its scan while n is 0:
	// if the offset moved past w after the check above and Release looked
	// before n counted w, nobody would call w back. Look once more now
	// that w is counted (a Release after this sees it).
	if m.v.Load() >= w.off {
		m.waiting = m.waiting[:len(m.waiting)-1]
		m.n.Store(int32(len(m.waiting)))
		m.mu.Unlock()
		w.fn(nil)
		return
	}
	m.mu.Unlock()
	if m.demand != nil {
		m.demand()
	}
}

// remove drops the Wait waiter id, if it is still registered.
func (m *Mark) remove(id uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, w := range m.waiting {
		if w.id == id {
			m.waiting = slices.Delete(m.waiting, i, i+1)
			m.n.Store(int32(len(m.waiting)))
			return
		}
	}
}

// armLocked sets the timer to fire at deadline. mu is held.
func (m *Mark) armLocked(deadline time.Time) {
	m.armed = deadline
	d := time.Until(deadline)
	if m.timer == nil {
		m.timer = time.AfterFunc(d, m.expire)
		return
	}
	m.timer.Reset(d)
}

// expire runs on the timer's goroutine: it answers the waiters whose
// deadline passed (and any the offset reached meanwhile).
func (m *Mark) expire() { m.Release() }

// Release calls back every waiter the offset reached, those whose timeout
// passed and, after Fail, all of them.
func (m *Mark) Release() {
	if m.n.Load() == 0 {
		return
	}
	m.relMu.Lock()
	defer m.relMu.Unlock()
	due := m.due[:0]
	now := time.Now()
	m.mu.Lock()
	v := m.v.Load()
	kept := m.waiting[:0]
	var next time.Time
	for _, w := range m.waiting {
		switch {
		case w.off <= v:
		case m.failure != nil:
			w.err = m.failure
		case !w.deadline.IsZero() && !now.Before(w.deadline):
			w.err = fmt.Errorf("watermark: %s offset %d not reached after %v: %w", m.name, w.off, w.timeout, ErrTimeout)
		default:
			if !w.deadline.IsZero() && (next.IsZero() || w.deadline.Before(next)) {
				next = w.deadline
			}
			kept = append(kept, w)
			continue
		}
		due = append(due, w)
	}
	clear(m.waiting[len(kept):])
	m.waiting = kept
	m.n.Store(int32(len(kept)))
	if next.IsZero() {
		m.armed = time.Time{}
		if m.timer != nil {
			m.timer.Stop()
		}
	} else if !next.Equal(m.armed) {
		m.armLocked(next)
	}
	m.mu.Unlock()
	for _, w := range due {
		w.fn(w.err)
	}
	clear(due)
	if cap(due) <= maxKeptDue {
		m.due = due[:0]
	} else {
		m.due = nil
	}
}

// maxKeptDue bounds the due list a Mark keeps between Releases.
const maxKeptDue = 4096

// Fail makes err the outcome of every waiter that the offset has not
// reached, now and later, and calls back those waiting. The first failure
// sticks.
func (m *Mark) Fail(err error) {
	m.mu.Lock()
	if m.failure == nil {
		m.failure = err
	}
	m.mu.Unlock()
	m.Release()
}

// Err returns the failure, or nil.
func (m *Mark) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failure
}

// Close calls back every waiter left with outcome(its offset) (nil if the
// offset was reached), and answers later registrations the same way at
// once. outcome is called without locks held.
func (m *Mark) Close(outcome func(off int64) error) {
	m.mu.Lock()
	m.closed = outcome
	left := m.waiting
	m.waiting = nil
	m.n.Store(0)
	if m.timer != nil {
		m.timer.Stop()
	}
	m.mu.Unlock()
	for _, w := range left {
		w.fn(outcome(w.off))
	}
}
