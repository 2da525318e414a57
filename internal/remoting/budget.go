package remoting

import "sync"

// DefaultMaxQueuedBytesPerConn is the default per-connection budget for
// response bytes not yet written to the socket.
const DefaultMaxQueuedBytesPerConn = 16 << 20

// outBudget bounds the memory one connection's responses hold before the
// socket takes them: the bytes of frames queued for the writer (or being
// written), of responses waiting for room, and an estimate for the requests
// whose handlers are still producing a response. It is what keeps a peer
// that stops reading from pinning responses without bound:
//
//   - A response (a handler's or a deferred one) waits for room before it
//     is queued: until queued bytes plus its own fit the limit, or nothing
//     is queued (a single response larger than the limit still goes).
//   - The reader admits a new request only while queued and waiting bytes
//     plus one estimated response per running handler fit the limit, so
//     handlers do not pile up holding responses they cannot queue. The
//     estimate is a moving average of this connection's response sizes.
//     With nothing queued, waiting or running a request is always admitted.
//
// Requests we send (Invoke) are counted but never wait. Waiters stop when
// the connection closes, which the write timeout does to a peer that
// stops reading. A limit <= 0 disables the budget.
type outBudget struct {
	limit int64

	mu      sync.Mutex
	queued  int64         // bytes of frames queued for or inside the writer
	waiting int64         // bytes of responses waiting for room
	running int64         // admitted requests without a produced response
	est     int64         // estimated response size
	wake    chan struct{} // non-nil while someone waits; closed on a change
}

// The estimate rises by half the difference to a larger response and
// decays by an eighth towards a smaller one: it follows large responses
// quickly (the safe side) and small ones within a few dozen.
const (
	estRiseShift  = 1
	estDecayShift = 3
	// estInitialShift: before any response, the estimate is limit/8, so
	// the first burst of pipelined requests on a connection holds about 8
	// responses at most, however large.
	estInitialShift = 3
)

func newOutBudget(limit int64) *outBudget {
	return &outBudget{limit: limit, est: max(limit>>estInitialShift, 1)}
}

// observeLocked updates the estimate with a response of n bytes.
func (b *outBudget) observeLocked(n int64) {
	if n > b.est {
		b.est += (n - b.est) >> estRiseShift
	} else {
		b.est -= (b.est - n) >> estDecayShift
	}
}

// sendKind says how a frame is counted.
type sendKind int

const (
	sendRequest         sendKind = iota // counted, never waits
	sendDeferred                        // a response written later: waits for room
	sendHandlerResponse                 // a handler's response: ends its admission, waits for room
	sendReply                           // a deferred Reply: counted and observed, never waits (the request's admission bounds it)
)

// waitLocked waits for a change, releasing mu meanwhile. It returns false if
// done closed first (mu is held again either way).
func (b *outBudget) waitLocked(done <-chan struct{}) bool {
	if b.wake == nil {
		b.wake = make(chan struct{})
	}
	w := b.wake
	b.mu.Unlock()
	select {
	case <-w:
		b.mu.Lock()
		return true
	case <-done:
		b.mu.Lock()
		return false
	}
}

// changedLocked wakes every waiter.
func (b *outBudget) changedLocked() {
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
}

// admit waits until a new request may be handled and counts it running.
func (b *outBudget) admit(done <-chan struct{}) bool {
	if b.limit <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for !b.admissibleLocked() {
		if !b.waitLocked(done) {
			return false
		}
	}
	b.running++
	return true
}

// tryAdmit counts a new request running if it may be handled now.
func (b *outBudget) tryAdmit() bool {
	if b.limit <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.admissibleLocked() {
		return false
	}
	b.running++
	return true
}

func (b *outBudget) admissibleLocked() bool {
	held := b.queued + b.waiting
	if held == 0 && b.running == 0 {
		return true
	}
	return held+(b.running+1)*b.est <= b.limit
}

// handlerDone ends the admission of a request that produced no response
// to send (none, a deferred one, oneway, or one that could not be sent).
func (b *outBudget) handlerDone() {
	if b.limit <= 0 {
		return
	}
	b.mu.Lock()
	b.running--
	b.changedLocked()
	b.mu.Unlock()
}

// acquire counts n bytes of a frame about to be queued, waiting for room
// as kind says. It returns false if done closed first; the frame is then
// not counted (but a handler's admission has ended).
func (b *outBudget) acquire(n int64, kind sendKind, done <-chan struct{}) bool {
	if b.limit <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch kind {
	case sendHandlerResponse:
		b.running--
		b.observeLocked(n)
		b.changedLocked()
	case sendReply:
		b.observeLocked(n)
	}
	if kind == sendHandlerResponse || kind == sendDeferred {
		b.waiting += n
		for b.queued > 0 && b.queued+n > b.limit {
			if !b.waitLocked(done) {
				b.waiting -= n
				b.changedLocked()
				return false
			}
		}
		b.waiting -= n
	}
	b.queued += n
	return true
}

// release uncounts n bytes of a frame the writer wrote or dropped.
func (b *outBudget) release(n int64) {
	if b.limit <= 0 || n == 0 {
		return
	}
	b.mu.Lock()
	b.queued -= n
	b.changedLocked()
	b.mu.Unlock()
}

// BudgetStats is a snapshot of a connection's response budget.
type BudgetStats struct {
	Limit   int64 // MaxQueuedBytesPerConn (<= 0: unlimited)
	Queued  int64 // bytes queued for or inside the writer
	Waiting int64 // bytes of responses waiting for room
	Running int64 // requests being handled whose response is not produced yet
	// Estimate is the expected size of the next response (moving average):
	// the reader admits a request while Queued+Waiting+(Running+1)*Estimate
	// fits the limit.
	Estimate int64
}

func (b *outBudget) stats() BudgetStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	return BudgetStats{Limit: b.limit, Queued: b.queued, Waiting: b.waiting, Running: b.running, Estimate: b.est}
}
