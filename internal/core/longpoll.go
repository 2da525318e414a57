package broker

// Long polling: pulls that found nothing new (code 19) with SUSPEND set are
// held per (topic, queueId) until
//   - the store's dispatcher makes an entry at or beyond the pull's offset
//     visible whose tags code matches the pull's subscription (onDispatch),
//   - or the suspend timeout passes (a per-request timer; no scanning loop).
// The pull is then re-run with commit and suspend disabled and its answer
// (19 with nextBeginOffset = offset if still nothing) written to the
// connection; a closed connection is skipped. The suspend timeout is the
// request's suspendTimeoutMillis capped at MaxSuspendTimeout (answers arrive
// well within the client's 30 s RPC timeout), or ShortPollingTimeout when
// long polling is disabled. At most MaxHeldPulls are held; beyond that a pull
// gets SYSTEM_BUSY (the client backs off 3 s) instead of growing memory.
//
// onDispatch runs on the store's dispatcher goroutine: it only takes the
// hold mutex (skipped entirely while nothing is held) and starts the
// re-runs on their own goroutines.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

type queueKey struct {
	topic   string
	queueID int32
}

type heldPull struct {
	c     *remoting.Conn
	req   *remoting.Command
	p     pullRequest
	sub   *subscription
	timer *time.Timer
	done  bool // guarded by pullHold.mu: answered or being answered
}

type pullHold struct {
	b     *Broker
	count atomic.Int64 // held pulls (read without the lock on the hot path)

	mu      sync.Mutex
	byQueue map[queueKey][]*heldPull
	closed  bool
}

func newPullHold(b *Broker) *pullHold {
	return &pullHold{b: b, byQueue: make(map[queueKey][]*heldPull)}
}

func (h *pullHold) timeout(p pullRequest) time.Duration {
	if !h.b.cfg.LongPollingEnable {
		return h.b.cfg.ShortPollingTimeout
	}
	d := p.suspend
	if d <= 0 {
		d = h.b.cfg.ShortPollingTimeout
	}
	return min(d, h.b.cfg.MaxSuspendTimeout)
}

// hold parks a pull; it returns false if the limit is reached or the broker
// is closing.
func (h *pullHold) hold(c *remoting.Conn, req *remoting.Command, p pullRequest, sub *subscription) bool {
	hp := &heldPull{c: c, req: req, p: p, sub: sub}
	k := queueKey{p.topic, p.queueID}
	h.mu.Lock()
	if h.closed || h.count.Load() >= int64(h.b.cfg.MaxHeldPulls) {
		h.mu.Unlock()
		return false
	}
	h.byQueue[k] = append(h.byQueue[k], hp)
	h.count.Add(1)
	hp.timer = time.AfterFunc(h.timeout(p), func() { h.fire(hp) })
	h.mu.Unlock()
	// A message dispatched between the pull's read and the registration
	// above woke nobody: check once more.
	if h.b.st.MaxOffset(p.topic, p.queueID) > p.offset {
		h.fire(hp)
	}
	return true
}

// take marks hp answered and unlinks it; false if it already was. The
// caller holds h.mu.
func (h *pullHold) takeLocked(hp *heldPull) bool {
	if hp.done {
		return false
	}
	hp.done = true
	k := queueKey{hp.p.topic, hp.p.queueID}
	list := h.byQueue[k]
	for i, x := range list {
		if x == hp {
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

// fire answers hp now (timeout, or the post-registration re-check).
func (h *pullHold) fire(hp *heldPull) {
	h.mu.Lock()
	ok := h.takeLocked(hp)
	h.mu.Unlock()
	if ok {
		hp.timer.Stop()
		h.answer(hp)
	}
}

// onDispatch is the store's dispatch listener.
func (h *pullHold) onDispatch(topic string, queueID int32, queueOffset int64, tagsCode int64) {
	if h.count.Load() == 0 {
		return
	}
	var wake []*heldPull
	h.mu.Lock()
	for _, hp := range h.byQueue[queueKey{topic, queueID}] {
		if queueOffset >= hp.p.offset && hp.sub.matchCode(tagsCode) {
			wake = append(wake, hp)
		}
	}
	for _, hp := range wake {
		h.takeLocked(hp)
	}
	h.mu.Unlock()
	for _, hp := range wake {
		hp.timer.Stop()
		go h.answer(hp)
	}
}

// answer re-runs a held pull and writes its response.
func (h *pullHold) answer(hp *heldPull) {
	select {
	case <-hp.c.Done():
		return
	default:
	}
	resp, err := h.b.pull(hp.c, hp.req, hp.p, false)
	if err != nil {
		resp = h.b.errorResponse(hp.req, err)
	}
	if resp == nil {
		return
	}
	if err := hp.c.WriteResponse(resp); err != nil {
		h.b.log.Debug("write held pull response failed", "topic", hp.p.topic, "queue_id", hp.p.queueID, "err", err)
	}
}

// closeAll answers every held pull and refuses new holds.
func (h *pullHold) closeAll() {
	h.mu.Lock()
	h.closed = true
	var all []*heldPull
	for _, list := range h.byQueue {
		all = append(all, list...)
	}
	for _, hp := range all {
		h.takeLocked(hp)
	}
	h.mu.Unlock()
	for _, hp := range all {
		hp.timer.Stop()
		h.answer(hp)
	}
}

// held returns the number of held pulls.
func (h *pullHold) held() int { return int(h.count.Load()) }
