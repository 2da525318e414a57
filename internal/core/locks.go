package core

// Queue locks for orderly consumers, for every front door: a consumer
// that must see a queue's messages in order locks it for its group, so
// that no other member of the group consumes it meanwhile.
//
// A queue is granted to a client (by its opaque ID) if it is unlocked,
// already held by that client (which renews it), or its lock has not been
// renewed for LockExpiry (60 s). It is memory work under one mutex, never
// touching disk: locks are not persisted, so after a restart every lock is
// free and clients lock again within their next cycle. A lock call also
// drops a bounded number of expired locks, so the table does not grow with
// queues nobody locks any more.

import (
	"sync"
	"time"
)

// LockedQueue names a queue as a client locks it: Broker is the name of
// the broker hosting it as the client gives it (part of the queue's
// identity), Topic and QueueID the queue.
type LockedQueue struct {
	Broker  string
	Topic   string
	QueueID int32
}

type lockKey struct {
	group string
	q     LockedQueue
}

type lockEntry struct {
	clientID string
	renewed  time.Time
}

// QueueLocks is the table of queue locks. Its methods are safe for
// concurrent use.
type QueueLocks struct {
	expiry time.Duration
	now    func() time.Time

	mu    sync.Mutex
	locks map[lockKey]lockEntry
}

// maxLockSweep bounds the expired locks one Lock call looks at.
const maxLockSweep = 64

func newQueueLocks(expiry time.Duration, now func() time.Time) *QueueLocks {
	return &QueueLocks{expiry: expiry, now: now, locks: make(map[lockKey]lockEntry)}
}

// QueueLocks returns the core's table of queue locks.
func (b *Broker) QueueLocks() *QueueLocks { return b.locks }

// Lock grants clientID of group what it can of qs and returns the queues
// of qs it now holds, in qs's order.
func (t *QueueLocks) Lock(group, clientID string, qs []LockedQueue) []LockedQueue {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	held := make([]LockedQueue, 0, len(qs))
	for _, q := range qs {
		k := lockKey{group, q}
		e, ok := t.locks[k]
		if ok && e.clientID != clientID && now.Sub(e.renewed) < t.expiry {
			continue
		}
		t.locks[k] = lockEntry{clientID: clientID, renewed: now}
		held = append(held, q)
	}
	t.sweepLocked(now)
	return held
}

func (t *QueueLocks) sweepLocked(now time.Time) {
	n := 0
	for k, e := range t.locks {
		if n++; n > maxLockSweep {
			return
		}
		if now.Sub(e.renewed) >= t.expiry {
			delete(t.locks, k)
		}
	}
}

// Unlock releases the queues of qs that clientID of group holds; the
// others are left as they are.
func (t *QueueLocks) Unlock(group, clientID string, qs []LockedQueue) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, q := range qs {
		k := lockKey{group, q}
		if e, ok := t.locks[k]; ok && e.clientID == clientID {
			delete(t.locks, k)
		}
	}
}

// Holder returns the client holding a queue's lock for group, if the lock
// has not expired.
func (t *QueueLocks) Holder(group string, q LockedQueue) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.locks[lockKey{group, q}]
	if !ok || t.now().Sub(e.renewed) >= t.expiry {
		return "", false
	}
	return e.clientID, true
}

// held returns the number of entries in the table (expired ones not yet
// swept included).
func (t *QueueLocks) held() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.locks)
}
