package broker

// Long polling: pulls that found nothing new (code 19) with SUSPEND set are
// held per (topic, queueId), through the core's waits (core/longpoll.go),
// until
//   - the store's dispatcher makes an entry at or beyond the pull's offset
//     visible whose tags code matches the pull's subscription,
//   - or the suspend timeout passes (a per-request timer; no scanning loop),
//   - or the broker closes.
// The pull is then re-run with commit and suspend disabled and its answer
// (19 with nextBeginOffset = offset if still nothing) written to the
// connection; a closed connection is skipped. The suspend timeout is the
// request's suspendTimeoutMillis capped at MaxSuspendTimeout (answers arrive
// well within the client's 30 s RPC timeout), or ShortPollingTimeout when
// long polling is disabled. At most MaxHeldPulls are held; beyond that a pull
// gets SYSTEM_BUSY (the client backs off 3 s) instead of growing memory.

import (
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

// heldPull is a held pull: its core wait and what it takes to re-run it.
type heldPull struct {
	core.Wait
	h   *pullHold
	c   *remoting.Conn
	req *remoting.Command
	p   pullRequest
	sub *subscription
}

// Wake implements core.Waker: the core woke the pull.
func (hp *heldPull) Wake() { hp.h.answer(hp) }

type pullHold struct {
	b *Broker
	n atomic.Int64 // pulls this front door holds (the core's waits may be shared)
}

func newPullHold(b *Broker) *pullHold {
	return &pullHold{b: b}
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
	hp := &heldPull{h: h, c: c, req: req, p: p, sub: sub}
	if !h.b.ownCore {
		select {
		case <-h.b.closed: // the shared core goes on holding; this door does not
			return false
		default:
		}
	}
	hp.Wait = core.Wait{Topic: p.topic, QueueID: p.queueID, Offset: p.offset, Match: sub, Waker: hp, Owner: h.b}
	h.n.Add(1) // before Hold: it may wake the pull before it returns
	if !h.b.core.Hold(&hp.Wait, h.timeout(p)) {
		h.n.Add(-1)
		return false
	}
	return true
}

// answer re-runs a held pull and writes its response.
func (h *pullHold) answer(hp *heldPull) {
	h.n.Add(-1)
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

// held returns the number of held pulls (of this front door only).
func (h *pullHold) held() int { return int(h.n.Load()) }
