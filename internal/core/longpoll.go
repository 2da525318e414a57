package core

// Waiting for new data (long polling), for every front door: a request
// that found nothing new on a queue is parked (Hold) until
//   - the store's dispatcher makes an entry at or beyond the wait's offset
//     visible whose tags code the wait matches (the dispatch listener,
//     which the core owns),
//   - or its timeout passes (a per-wait timer; no scanning loop),
//   - or the core closes (Close).
// The wait's Waker is then called exactly once: on a goroutine of its own
// after a dispatch, on the timer's goroutine after the timeout, on the
// caller's goroutine after Close or the re-check that Hold makes. What the
// front door does then is its own (the RocketMQ adapter re-runs the pull
// and writes the answer: broker/longpoll.go). At most MaxWaits are held;
// Hold refuses more instead of growing memory. WaitForData is the same
// wait as a blocking call.
//
// onDispatch runs on the store's dispatcher goroutine: it only takes the
// hold mutex (skipped entirely while nothing is held) and starts the
// wake-ups on their own goroutines.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

type queueKey struct {
	topic   string
	queueID int32
}

// Waker is told, once, that a wait ended.
type Waker interface{ Wake() }

// TagsMatcher decides whether an entry with the given tags code wakes a
// wait.
type TagsMatcher interface{ MatchCode(tagsCode int64) bool }

// Wait is one parked request: set the exported fields, then Hold it. A
// front door usually embeds it in its own request (no allocation of its
// own).
type Wait struct {
	Topic   string
	QueueID int32
	Offset  int64       // an entry at or beyond this queue offset wakes it
	Match   TagsMatcher // nil: any entry
	Waker   Waker
	// Owner, if set, names the front door holding the wait, so that it can
	// wake its own waits when it stops (WakeOwned) on a core that others
	// go on using. Compared for identity.
	Owner any

	timer *time.Timer // nil: no timeout
	done  bool        // guarded by waits.mu: woken or being woken
}

func (w *Wait) matches(queueOffset, tagsCode int64) bool {
	return queueOffset >= w.Offset && (w.Match == nil || w.Match.MatchCode(tagsCode))
}

type waits struct {
	b     *Broker
	count atomic.Int64 // held waits (read without the lock on the hot path)

	mu      sync.Mutex
	byQueue map[queueKey][]*Wait
	closed  bool
}

func newWaits(b *Broker) *waits {
	return &waits{b: b, byQueue: make(map[queueKey][]*Wait)}
}

// Hold parks w until it is woken (see the file comment); timeout <= 0
// means none. It returns false, and w is not held, when MaxWaits are held
// or the core is closing.
func (b *Broker) Hold(w *Wait, timeout time.Duration) bool { return b.waits.hold(w, timeout) }

func (h *waits) hold(w *Wait, timeout time.Duration) bool {
	k := queueKey{w.Topic, w.QueueID}
	h.mu.Lock()
	if h.closed || h.count.Load() >= int64(h.b.cfg.MaxWaits) {
		h.mu.Unlock()
		return false
	}
	h.byQueue[k] = append(h.byQueue[k], w)
	h.count.Add(1)
	if timeout > 0 {
		w.timer = time.AfterFunc(timeout, func() { h.fire(w) })
	}
	h.mu.Unlock()
	// A message dispatched between the caller's read and the registration
	// above woke nobody: check once more.
	if h.b.st.MaxOffset(w.Topic, w.QueueID) > w.Offset {
		h.fire(w)
	}
	return true
}

// take marks w woken and unlinks it; false if it already was. The
// caller holds h.mu.
func (h *waits) takeLocked(w *Wait) bool {
	if w.done {
		return false
	}
	w.done = true
	k := queueKey{w.Topic, w.QueueID}
	list := h.byQueue[k]
	for i, x := range list {
		if x == w {
			list[i] = list[len(list)-1]
			list[len(list)-1] = nil
			list = list[:len(list)-1]
			break
		}
	}
	if len(list) == 0 {
		delete(h.byQueue, k)
	} else {
		h.byQueue[k] = list
	}
	h.count.Add(-1)
	return true
}

func (w *Wait) stopTimer() {
	if w.timer != nil {
		w.timer.Stop()
	}
}

// fire wakes w now (timeout, or the post-registration re-check).
func (h *waits) fire(w *Wait) {
	h.mu.Lock()
	ok := h.takeLocked(w)
	h.mu.Unlock()
	if ok {
		w.stopTimer()
		w.Waker.Wake()
	}
}

// onDispatch wakes the waits a dispatched entry satisfies.
func (h *waits) onDispatch(topic string, queueID int32, queueOffset int64, tagsCode int64) {
	if h.count.Load() == 0 {
		return
	}
	var wake []*Wait
	h.mu.Lock()
	for _, w := range h.byQueue[queueKey{topic, queueID}] {
		if w.matches(queueOffset, tagsCode) {
			wake = append(wake, w)
		}
	}
	for _, w := range wake {
		h.takeLocked(w)
	}
	h.mu.Unlock()
	for _, w := range wake {
		w.stopTimer()
		go w.Waker.Wake()
	}
}

// closeAll wakes every held wait and refuses new ones.
func (h *waits) closeAll() {
	h.mu.Lock()
	h.closed = true // from now on hold refuses, so nothing is left behind
	h.mu.Unlock()
	h.wakeWhere(func(*Wait) bool { return true })
}

// WakeOwned wakes every held wait whose Owner is owner (a front door that
// stops answers its held requests); other waits, and new ones, are held
// as before.
func (b *Broker) WakeOwned(owner any) {
	b.waits.wakeWhere(func(w *Wait) bool { return w.Owner == owner })
}

// wakeWhere wakes every held wait for which pick returns true.
func (h *waits) wakeWhere(pick func(*Wait) bool) {
	var woken []*Wait
	h.mu.Lock()
	for _, list := range h.byQueue {
		for _, w := range list {
			if pick(w) {
				woken = append(woken, w)
			}
		}
	}
	for _, w := range woken {
		h.takeLocked(w)
	}
	h.mu.Unlock()
	for _, w := range woken {
		w.stopTimer()
		w.Waker.Wake()
	}
}

// HeldWaits returns the number of held waits.
func (b *Broker) HeldWaits() int { return int(b.waits.count.Load()) }

// chanWaker closes its channel when woken.
type chanWaker chan struct{}

func (c chanWaker) Wake() { close(c) }

// WaitForData blocks until queue (topic, queueID) may have an entry at or
// beyond offset (one was dispatched, or the core is closing: the caller
// reads again to know), or ctx is done (ctx.Err()). It returns ErrBusy at
// once when MaxWaits are held.
func (b *Broker) WaitForData(ctx context.Context, topic string, queueID int32, offset int64) error {
	woken := make(chanWaker)
	w := &Wait{Topic: topic, QueueID: queueID, Offset: offset, Waker: woken}
	if !b.Hold(w, 0) {
		if b.waits.isClosed() {
			return nil
		}
		return Errorf(ErrBusy, "too many waits (%d)", b.cfg.MaxWaits)
	}
	select {
	case <-woken:
		return nil
	case <-ctx.Done():
		b.waits.mu.Lock()
		taken := b.waits.takeLocked(w)
		b.waits.mu.Unlock()
		if !taken {
			<-woken // being woken right now
			return nil
		}
		return ctx.Err()
	}
}

func (h *waits) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}
