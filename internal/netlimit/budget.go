package netlimit

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// Budget is the broker-wide bound on bytes held by requests being read and
// decoded. The zero value is not usable; use NewBudget.
type Budget struct {
	capacityBytes int64

	mu         sync.Mutex
	heldBytes  int64     // by every claim, growth included
	growHeld   int64     // held by claims now waiting in Grow
	growers    []*waiter // FIFO, served first
	acquirers  []*waiter // FIFO
	doors      map[string]*Door
	overdrafts uint64 // growths granted beyond the capacity
}

// waiter is one Acquire or Grow that did not fit at once.
type waiter struct {
	d     *Door
	n     int64
	held  int64 // what the claim already holds (growers)
	ready chan struct{}
	done  bool // granted (under Budget.mu)
}

// NewBudget returns a budget of capacityBytes (at least 1).
func NewBudget(capacityBytes int64) *Budget {
	if capacityBytes < 1 {
		panic(fmt.Sprintf("netlimit: budget capacity %d", capacityBytes))
	}
	return &Budget{capacityBytes: capacityBytes, doors: map[string]*Door{}}
}

// CapacityBytes returns the budget's capacity.
func (b *Budget) CapacityBytes() int64 { return b.capacityBytes }

// Door returns the account of the front door called name (created on first
// use): its claims share the budget, and its figures are reported apart.
func (b *Budget) Door(name string) *Door {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.doors[name]
	if !ok {
		d = &Door{b: b, name: name}
		b.doors[name] = d
	}
	return d
}

// Door is one front door's account of the budget.
type Door struct {
	b         *Budget
	name      string
	heldBytes atomic.Int64
	waiting   atomic.Int64
	waited    atomic.Uint64 // requests that had to wait, since start
}

// Claim is the bytes one request holds. Release returns them; the zero
// Claim holds nothing.
type Claim struct {
	d *Door
	n int64
}

// Acquire waits until n bytes fit in the budget and returns a claim on
// them. A request larger than the whole budget is granted when nothing
// else is held. It returns ctx's error if ctx ends first (holding nothing).
func (d *Door) Acquire(ctx context.Context, n int64) (Claim, error) {
	if n < 0 {
		panic(fmt.Sprintf("netlimit: acquire %d bytes", n))
	}
	if err := d.b.wait(ctx.Done(), ctx.Err, d, n, 0, false); err != nil {
		return Claim{}, err
	}
	return Claim{d: d, n: n}, nil
}

// ErrStopped is returned by AcquireUntil when its done channel closes.
var ErrStopped = errors.New("netlimit: stopped while waiting for the request budget")

// AcquireUntil is Acquire for a caller that has a channel closed when it
// stops (a connection's), not a context: it returns ErrStopped if done
// closes first.
func (d *Door) AcquireUntil(done <-chan struct{}, n int64) (Claim, error) {
	if n < 0 {
		panic(fmt.Sprintf("netlimit: acquire %d bytes", n))
	}
	if err := d.b.wait(done, func() error { return ErrStopped }, d, n, 0, false); err != nil {
		return Claim{}, err
	}
	return Claim{d: d, n: n}, nil
}

// ClaimBytes is AcquireUntil for a caller that keeps the count itself
// (a connection's reader, which allocates nothing per frame): it reports
// whether n bytes were taken; give them back with ReleaseBytes.
func (d *Door) ClaimBytes(n int64, done <-chan struct{}) bool {
	_, err := d.AcquireUntil(done, n)
	return err == nil
}

// TryClaimBytes is ClaimBytes without the wait: it takes n bytes only if
// they fit now without overtaking a waiter, and reports whether it did.
func (d *Door) TryClaimBytes(n int64) bool {
	if n < 0 {
		panic(fmt.Sprintf("netlimit: claim %d bytes", n))
	}
	b := d.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.growers) > 0 || len(b.acquirers) > 0 || b.heldBytes+n > b.capacityBytes {
		return false
	}
	b.takeLocked(d, n)
	return true
}

// CapacityBytes returns the capacity of the budget the door shares.
func (d *Door) CapacityBytes() int64 { return d.b.capacityBytes }

// ReleaseBytes gives back n bytes taken with ClaimBytes.
func (d *Door) ReleaseBytes(n int64) {
	c := Claim{d: d, n: n}
	c.Release()
}

// Grow adds n bytes to the claim, waiting until they fit; growers are
// served before new requests, and the first grower is granted beyond the
// capacity when every held byte belongs to a waiting grower. On ctx's end
// the claim keeps what it held.
func (c *Claim) Grow(ctx context.Context, n int64) error {
	if c.d == nil {
		panic("netlimit: Grow on an empty claim")
	}
	if n <= 0 {
		return nil
	}
	if err := c.d.b.wait(ctx.Done(), ctx.Err, c.d, n, c.n, true); err != nil {
		return err
	}
	c.n += n
	return nil
}

// Bytes returns what the claim holds.
func (c *Claim) Bytes() int64 { return c.n }

// Release returns the claim's bytes; it is idempotent.
func (c *Claim) Release() {
	if c.d == nil || c.n == 0 {
		c.d = nil
		return
	}
	b := c.d.b
	b.mu.Lock()
	b.heldBytes -= c.n
	c.d.heldBytes.Add(-c.n)
	b.grantLocked()
	b.mu.Unlock()
	c.d, c.n = nil, 0
}

// wait takes n bytes for door d, waiting if they do not fit, until done
// closes (then it returns stopErr()). held is what the caller's claim
// holds already (grow: true).
func (b *Budget) wait(done <-chan struct{}, stopErr func() error, d *Door, n, held int64, grow bool) error {
	b.mu.Lock()
	if b.fitsLocked(n, held, grow) {
		b.takeLocked(d, n)
		b.mu.Unlock()
		return nil
	}
	w := &waiter{d: d, n: n, held: held, ready: make(chan struct{})}
	if grow {
		b.growers = append(b.growers, w)
		b.growHeld += held
	} else {
		b.acquirers = append(b.acquirers, w)
	}
	// The new waiter may be what makes every holder a waiter.
	b.grantLocked()
	d.waiting.Add(1)
	d.waited.Add(1)
	b.mu.Unlock()
	defer d.waiting.Add(-1)
	select {
	case <-w.ready:
		return nil
	case <-done:
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.done { // granted as it stopped: give it back
		b.heldBytes -= n
		d.heldBytes.Add(-n)
		b.grantLocked()
		return stopErr()
	}
	if grow {
		b.growers = remove(b.growers, w)
		b.growHeld -= held
	} else {
		b.acquirers = remove(b.acquirers, w)
	}
	b.grantLocked()
	return stopErr()
}

// fitsLocked reports whether a request of n bytes may be granted now,
// without overtaking a waiter of its kind (or, for an acquirer, any
// grower).
func (b *Budget) fitsLocked(n, held int64, grow bool) bool {
	if grow {
		return len(b.growers) == 0 && b.heldBytes+n <= b.capacityBytes
	}
	if len(b.growers) > 0 {
		return false
	}
	if len(b.acquirers) > 0 {
		return n <= b.capacityBytes/64 && b.heldBytes+n <= b.capacityBytes
	}
	return b.heldBytes+n <= b.capacityBytes || b.heldBytes == 0
}

func (b *Budget) takeLocked(d *Door, n int64) {
	b.heldBytes += n
	d.heldBytes.Add(n)
}

// grantLocked wakes the waiters that may go: growers in order while they
// fit (the first beyond the capacity when every held byte is a waiting
// grower's: nothing else would ever be released), then acquirers.
func (b *Budget) grantLocked() {
	for len(b.growers) > 0 {
		w := b.growers[0]
		stuck := b.heldBytes == b.growHeld
		if b.heldBytes+w.n > b.capacityBytes && !stuck {
			return
		}
		if b.heldBytes+w.n > b.capacityBytes {
			b.overdrafts++
		}
		b.growers = b.growers[1:]
		b.growHeld -= w.held
		b.grantWaiterLocked(w)
	}
	// Acquirers in order; a small one (at most a 64th of the capacity: a
	// client's everyday request) may pass a large one that waits, so that
	// large requests filling the budget do not queue everything else
	// behind them.
	kept := b.acquirers[:0]
	head := true
	for _, w := range b.acquirers {
		fits := b.heldBytes+w.n <= b.capacityBytes
		if (head && (fits || b.heldBytes == 0)) || (!head && fits && w.n <= b.capacityBytes/64) {
			b.grantWaiterLocked(w)
			continue
		}
		head = false
		kept = append(kept, w)
	}
	clear(b.acquirers[len(kept):])
	b.acquirers = kept
}

// grantWaiterLocked counts w's bytes as held and wakes it.
func (b *Budget) grantWaiterLocked(w *waiter) {
	b.takeLocked(w.d, w.n)
	w.done = true
	close(w.ready)
}

func remove(ws []*waiter, w *waiter) []*waiter {
	for i, x := range ws {
		if x == w {
			return append(ws[:i], ws[i+1:]...)
		}
	}
	return ws
}

// DoorStats is one door's figures at a moment.
type DoorStats struct {
	Door      string
	HeldBytes int64  // held by the door's requests now
	Waiting   int64  // the door's requests waiting for budget now
	Waited    uint64 // the door's requests that had to wait, since start
}

// Stats returns every door's figures, sorted by door name.
func (b *Budget) Stats() []DoorStats {
	b.mu.Lock()
	out := make([]DoorStats, 0, len(b.doors))
	for _, d := range b.doors {
		out = append(out, DoorStats{Door: d.name, HeldBytes: d.heldBytes.Load(), Waiting: d.waiting.Load(), Waited: d.waited.Load()})
	}
	b.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Door < out[j].Door })
	return out
}

// HeldBytes returns the bytes held by every door's requests.
func (b *Budget) HeldBytes() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.heldBytes
}
