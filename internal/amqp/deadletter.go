package amqp

// Expiry, length limits and dead-lettering.
//
// A message leaves a queue unacknowledged for one of four reasons:
// expired (x-message-ttl, or the message's expiration property, measured
// from when it was stored), maxlen (x-max-length with drop-head: the
// oldest ready message makes room), delivery_limit (requeued more than
// x-delivery-limit times) and rejected (basic.reject or basic.nack
// without requeue). Expiry is checked when a message reaches the head of
// the queue: when it is about to be served, and by the server's sweep
// every expirySweepInterval for queues that may hold expiring messages.
//
// Without x-dead-letter-exchange the message is settled at once. With
// one, it stays in flight while a copy is routed by that exchange (with
// x-dead-letter-routing-key, or its own routing key) and stored as a new
// record; only once that copy is stored as the flush mode demands
// (fdatasync under SYNC_FLUSH) and visible in its queues is the original
// settled. A crash in between delivers the copy and, again, the original:
// a duplicate, never a loss. A copy that cannot be stored leaves the
// original in the queue: after deadLetterRetry it goes back to its place
// and is served again (delivered, or expired and dead-lettered again). The
// copy carries RabbitMQ's x-death header (one entry per queue and reason,
// with a count; x-first-death-* set once) and loses its expiration
// (kept as the entry's original-expiration). A copy routed back to a
// queue its x-death already names, with no rejection in its history, is
// not delivered there (a cycle), as RabbitMQ does. A dead-letter exchange
// that does not exist drops the message (RabbitMQ's rule too). A copy
// for queues of other groups goes to their homes (deadletter_remote.go).
//
// Dead-letter copies are stored and confirmed on the server's worker
// goroutine (Server.work), which runs queued functions in order; queue
// code hands it work under queue.mu without blocking.

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
)

// Dead-letter reasons, as x-death names them.
const (
	reasonRejected      = "rejected"
	reasonExpired       = "expired"
	reasonMaxLen        = "maxlen"
	reasonDeliveryLimit = "delivery_limit"
)

const (
	// expirySweepInterval is how often queues with expiring messages are
	// looked at without a consumer taking from them.
	expirySweepInterval = 50 * time.Millisecond
	// maxExpiredPerSweep bounds the messages one sweep expires per queue.
	maxExpiredPerSweep = 1024
	// deadLetterRetry is how long a message whose dead-letter copy could
	// not be stored waits before it is tried again.
	deadLetterRetry = time.Second
)

func nowMs() int64 { return time.Now().UnixMilli() }

// worker runs queued functions in order on one goroutine.
type worker struct {
	mu   sync.Mutex
	q    []func()
	kick chan struct{}
}

func newWorker() *worker { return &worker{kick: make(chan struct{}, 1)} }

// add queues fn; it never blocks.
func (w *worker) add(fn func()) {
	w.mu.Lock()
	w.q = append(w.q, fn)
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// run runs the queued functions until stop closes.
func (w *worker) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-w.kick:
		}
		for {
			w.mu.Lock()
			q := w.q
			w.q = nil
			w.mu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, fn := range q {
				fn()
			}
		}
	}
}

// expiresAt returns when m expires in q (ms), or math.MaxInt64.
func (q *queue) expiresAt(m *storedMessage) int64 {
	at := int64(math.MaxInt64)
	if q.a.ttl >= 0 {
		at = m.storeTs + q.a.ttl
	}
	if exp, ok := messageExpiration(m.props); ok {
		at = min(at, m.storeTs+exp)
	}
	return at
}

func (q *queue) expiredLocked(m *storedMessage, now int64) bool {
	return now > q.expiresAt(m)
}

// messageExpiration returns the expiration property (ms) of raw content
// properties, if set and valid.
func messageExpiration(props []byte) (int64, bool) {
	if len(props) < 2 || (uint16(props[0])<<8|uint16(props[1]))&wire.FlagExpiration == 0 {
		return 0, false
	}
	var p wire.BasicProperties
	if p.Read(wire.NewReader(props)) != nil {
		return 0, false
	}
	return parseExpiration(p.Expiration)
}

// parseExpiration parses an expiration property: milliseconds, a
// non-negative integer.
func parseExpiration(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n >= 0
}

// deadLetterLocked takes offset o (already handed out or just taken from
// the head) out of the queue for reason: settled at once without a
// dead-letter exchange, else once its copy is stored. done (if not nil)
// runs once the copy is in its queues or failed. q.mu is held.
func (q *queue) deadLetterLocked(o int64, reason string, done func()) {
	if !q.a.hasDLX {
		q.settleLocked(o)
		q.stats.dropped.Add(1)
		if done != nil {
			done()
		}
		return
	}
	q.inflight[o] = true
	q.dying++
	srv := q.v.srv
	srv.work.add(func() {
		srv.deadLetter(q, o, reason, done)
	})
}

// deadLetter routes and stores the dead-letter copy of q's offset o; it
// runs on the worker.
func (s *Server) deadLetter(q *queue, o int64, reason string, done func()) {
	if done == nil {
		done = func() {}
	}
	m, release, ok := q.read(o)
	if !ok {
		q.deadLettered(o, true)
		done()
		return
	}
	rec, qs, remote, _, err := q.deadLetterCopy(&m, reason)
	release()
	if err != nil {
		s.log.Error("amqp: dead-lettering: cannot build the copy; the message is dropped", "queue", q.name, "offset", o, "err", err)
	}
	if len(remote) > 0 { // queues of other groups (deadletter_remote.go)
		s.remoteDL.add(s, &dlItem{q: q, o: o, reason: reason, done: done})
		return
	}
	if len(qs) == 0 {
		q.deadLettered(o, true)
		done()
		return
	}
	put := func(r store.PutResult, phys int64) {
		s.work.add(func() {
			s.copyStored(q, o, qs, r, phys)
			done()
		})
	}
	if res, phys, pending := s.store.PutRecordDeferred(s.baseCtx, rec, put); !pending {
		put(res, phys)
	}
}

// deadLetterCopy builds the dead-letter record of m leaving q for
// reason, and returns the queues here it goes to (rec nil when none),
// the names of queues it may go to on other groups (in a cluster: the
// dead-letter routing key through the default exchange when no queue
// here has that name, or the dead-letter exchange's bindings to other
// groups' queues) and the copy's content properties. No queue at all: it
// is dropped (the dead-letter exchange does not exist, or routes it
// nowhere but to a cycle).
func (q *queue) deadLetterCopy(m *storedMessage, reason string) ([]byte, []*queue, []string, []byte, error) {
	key := m.routingKey
	if q.a.hasDLRK {
		key = q.a.dlrk
	}
	props, deaths, err := deathProps(m.props, q.name, reason, m, time.Now())
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("unreadable message properties: %w", err)
	}
	qs, remote, err := q.v.routeAll(nil, q.a.dlx, key, props)
	if err != nil { // the exchange does not exist: dropped, as RabbitMQ does
		qs, remote = nil, nil
	}
	if q.v.srv.cfg.Cluster == nil {
		remote = nil
	} else if (q.a.dlx == "" || q.a.dlx == "amq.default") && len(qs) == 0 && key != "" {
		remote = []string{key}
	}
	qs = slices.DeleteFunc(qs, func(t *queue) bool { return isCycle(deaths, t.name, reason) })
	remote = slices.DeleteFunc(remote, func(name string) bool { return isCycle(deaths, name, reason) })
	if len(qs) == 0 {
		return nil, nil, remote, props, nil
	}
	dests := make([]record.Dest, len(qs))
	for i, t := range qs {
		dests[i] = record.Dest{Topic: t.topic, QueueID: queueID}
	}
	rec, err := record.AppendEnvelope(nil, record.AMQP, 1, dests,
		appendMessage(nil, &storedMessage{exchange: q.a.dlx, routingKey: key, props: props, body: m.body}))
	if err != nil {
		return nil, nil, nil, nil, err
	}
	return rec, qs, remote, props, nil
}

// deadLetterRefused dead-letters (reason maxlen) a publish a full
// x-overflow=reject-publish-dlx queue refused; the publisher's confirm
// is a nack, sent without waiting for the copy (which, like RabbitMQ's,
// is not confirmed to anyone: a crash before it is stored loses it).
// It copies m and runs on the worker.
func (s *Server) deadLetterRefused(q *queue, m *storedMessage) {
	c := &storedMessage{exchange: m.exchange, routingKey: m.routingKey, props: slices.Clone(m.props),
		body: slices.Clone(m.body), storeTs: nowMs()}
	s.work.add(func() {
		rec, qs, _, _, err := q.deadLetterCopy(c, reasonMaxLen) // queues of this group only
		if err != nil {
			s.log.Error("amqp: dead-lettering a refused publish: cannot build the copy; it is dropped", "queue", q.name, "err", err)
		}
		if len(qs) == 0 {
			q.stats.dropped.Add(1)
			return
		}
		put := func(r store.PutResult, phys int64) {
			s.work.add(func() {
				if r.Status != store.PutOK {
					s.log.Error("amqp: dead-letter copy of a refused publish not stored", "queue", q.name, "status", r.Status, "err", r.Err)
					q.stats.dropped.Add(1)
					return
				}
				if waitVisible(s.baseCtx, s.store, phys+1) != nil {
					return
				}
				q.stats.deadLettered.Add(1)
				for _, t := range qs {
					t.stats.published.Add(1)
					t.mu.Lock()
					t.dropOverflowLocked()
					t.mu.Unlock()
					t.pump()
				}
			})
		}
		if res, phys, pending := s.store.PutRecordDeferred(s.baseCtx, rec, put); !pending {
			put(res, phys)
		}
	})
}

// copyStored runs on the worker once the store answered a dead-letter
// copy: the original is settled once the copy is visible.
func (s *Server) copyStored(q *queue, o int64, qs []*queue, r store.PutResult, phys int64) {
	if r.Status != store.PutOK {
		s.log.Error("amqp: dead-letter copy not stored; the message stays and is tried again", "queue", q.name, "offset", o,
			"status", r.Status, "err", r.Err)
		time.AfterFunc(deadLetterRetry, func() {
			select {
			case <-s.stop: // closed: the original stays unsettled for the next start
			default:
				q.retryDeadLetter(o)
			}
		})
		return
	}
	if waitVisible(s.baseCtx, s.store, phys+1) != nil {
		return // the store closed: the original stays unsettled
	}
	q.stats.deadLettered.Add(1)
	for _, t := range qs {
		t.stats.published.Add(1)
		t.mu.Lock()
		t.dropOverflowLocked() // a drop-head limit holds for copies too
		t.mu.Unlock()
		t.pump()
	}
	q.deadLettered(o, false)
}

// deadLettered settles o once its dead-letter copy is stored (or the
// message was dropped).
func (q *queue) deadLettered(o int64, dropped bool) {
	q.mu.Lock()
	q.dying--
	q.settleLocked(o)
	q.mu.Unlock()
	if dropped {
		q.stats.dropped.Add(1)
	}
	q.pump()
}

// retryDeadLetter puts o back at the head after a failed copy.
func (q *queue) retryDeadLetter(o int64) {
	q.mu.Lock()
	q.dying--
	q.requeueLocked(o, false)
	q.mu.Unlock()
	q.pump()
}

// isCycle reports whether a copy dead-lettered for reason would go back
// to a queue its x-death names without a rejection on the way.
func isCycle(deaths []any, target, reason string) bool {
	if reason == reasonRejected {
		return false
	}
	named := false
	for _, d := range deaths {
		t, _ := d.(wire.Table)
		if tableString(t["reason"]) == reasonRejected {
			return false
		}
		named = named || tableString(t["queue"]) == target
	}
	return named
}

// deathProps returns the content properties of a dead-letter copy: the
// headers get an updated x-death (and x-first-death-* once), the
// expiration goes. It also returns the x-death entries.
func deathProps(raw []byte, queue, reason string, m *storedMessage, now time.Time) ([]byte, []any, error) {
	var p wire.BasicProperties
	if err := p.Read(wire.NewReader(raw)); err != nil {
		return nil, nil, err
	}
	h := wire.Table{}
	for k, v := range p.Headers {
		h[k] = v
	}
	deaths, _ := h["x-death"].([]any)
	deaths = slices.Clone(deaths)
	i := slices.IndexFunc(deaths, func(d any) bool {
		t, _ := d.(wire.Table)
		return tableString(t["queue"]) == queue && tableString(t["reason"]) == reason
	})
	var entry wire.Table
	if i >= 0 {
		entry, _ = deaths[i].(wire.Table)
		deaths = slices.Delete(deaths, i, i+1)
		entry = maps.Clone(entry)
		entry["count"] = countOf(entry["count"]) + 1
	} else {
		entry = wire.Table{"count": int64(1), "reason": reason, "queue": queue, "exchange": m.exchange,
			"routing-keys": []any{m.routingKey}}
	}
	entry["time"] = wire.Timestamp(now.Unix())
	if p.Flags&wire.FlagExpiration != 0 {
		entry["original-expiration"] = p.Expiration
		p.Flags &^= wire.FlagExpiration
		p.Expiration = ""
	}
	deaths = append([]any{entry}, deaths...)
	h["x-death"] = deaths
	if _, ok := h["x-first-death-reason"]; !ok {
		h["x-first-death-reason"], h["x-first-death-queue"], h["x-first-death-exchange"] = reason, queue, m.exchange
	}
	p.Headers = h
	p.Flags |= wire.FlagHeaders
	var w wire.Writer
	p.Write(&w)
	return w.Buf, deaths, nil
}

func countOf(v any) int64 {
	if n, ok := number(v); ok {
		return int64(n)
	}
	return 0
}

// expireHead expires (and dead-letters) the messages at the head of the
// queue that are past their time, and notes when the new head expires.
func (q *queue) expireHead(now int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gone || (q.a.ttl < 0 && !q.expSeen) || now < q.nextExpiry || q.isStream() {
		return
	}
	for range maxExpiredPerSweep {
		o, fromReturned, ok := q.headLocked()
		if !ok {
			q.nextExpiry = math.MaxInt64
			return
		}
		m, release, ok := q.read(o)
		if !ok {
			q.popHeadLocked(o, fromReturned)
			q.leftReadyLocked(o, 0)
			q.settleLocked(o)
			continue
		}
		at := q.expiresAt(&m)
		size := int64(len(m.body))
		release()
		if now <= at {
			q.nextExpiry = at
			if at < math.MaxInt64 {
				q.nextExpiry = at + 1 // expired once now > at
			}
			return
		}
		q.popHeadLocked(o, fromReturned)
		q.leftReadyLocked(o, size)
		q.deadLetterLocked(o, reasonExpired, nil)
	}
}

// unusedFor reports whether the queue has x-expires and has gone unused
// (no consumer, no basic.get, no redeclare) that long: it is deleted
// then, with its messages, as RabbitMQ does. The time restarts when the
// broker does.
func (q *queue) unusedFor(now int64) bool {
	if q.a.expires < 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.gone && len(q.consumers) == 0 && now-q.lastUsed >= q.a.expires
}

// headLocked returns the next offset to serve without taking it.
func (q *queue) headLocked() (int64, bool, bool) {
	if q.byPriority() {
		o, _, ok := q.prioHeadLocked()
		return o, true, ok
	}
	if len(q.returned) > 0 {
		return q.returned[0], true, true
	}
	hi := q.v.srv.store.MaxOffset(q.topic, queueID)
	q.cursor = max(q.cursor, q.floor)
	for q.cursor < hi && (q.settled[q.cursor] || q.inflight[q.cursor]) {
		q.cursor++
	}
	return q.cursor, false, q.cursor < hi
}

func (q *queue) popHeadLocked(o int64, fromReturned bool) {
	if q.byPriority() {
		q.prioPopLocked(o)
		return
	}
	if fromReturned {
		q.returned = q.returned[1:]
	} else {
		q.cursor = o + 1
	}
}

// dropOverflowLocked makes the queue hold at most x-max-length ready
// messages and x-max-length-bytes of their bodies, dropping
// (dead-lettering) from the head. q.mu is held.
func (q *queue) dropOverflowLocked() {
	if !q.a.limited() || q.a.rejectPublish {
		return
	}
	for q.overLimitLocked() {
		o, _, ok := q.nextLocked()
		if !ok {
			return
		}
		if q.a.maxBytes >= 0 {
			q.leftReadyLocked(o, q.bodySizeLocked(o))
		}
		q.inflight[o] = true // deadLetterLocked settles or keeps it in flight
		q.deadLetterLocked(o, reasonMaxLen, nil)
	}
}

// admitLocked reserves room for one publish of a body of size bytes in
// a reject-publish queue; false: the queue is full (it would hold more
// than x-max-length messages or x-max-length-bytes, as RabbitMQ
// decides). q.mu is held.
func (q *queue) admitLocked(size int64) bool {
	if q.a.maxLen >= 0 && q.readyLocked()+int64(q.pendingPub) >= q.a.maxLen {
		return false
	}
	if q.a.maxBytes >= 0 && q.readyBytesLocked()+q.pendingSize+size > q.a.maxBytes {
		return false
	}
	q.pendingPub++
	q.pendingSize += size
	return true
}

// unreserveLocked returns the room admitLocked reserved for a publish
// (stored or not). q.mu is held.
func (q *queue) unreserveLocked(size int64) {
	if q.a.rejectPublish && q.a.limited() {
		q.pendingPub--
		q.pendingSize -= size
	}
}

// wakeSweep wakes the sweep if it is parked; call it after adding a
// connection or a queue.
func (s *Server) wakeSweep() {
	select {
	case s.sweepWake <- struct{}{}:
	default:
	}
}

// nothingToSweep reports whether the server has no connection and no
// queue: no message to expire, queue to delete, client to tell about a
// full disk or consumer to time out.
func (s *Server) nothingToSweep() bool {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	if n > 0 {
		return false
	}
	for _, v := range s.vhosts {
		v.mu.Lock()
		n += len(v.queues)
		v.mu.Unlock()
	}
	return n == 0
}

// sweep runs expireHead over every queue, and checkBlocked, every
// expirySweepInterval. With no queue and no connection it has nothing to
// look at: it parks, its ticker stopped, until one appears (wakeSweep),
// and then sweeps at once.
func (s *Server) sweep() {
	defer s.wg.Done()
	t := time.NewTicker(expirySweepInterval)
	defer t.Stop()
	tick := 0
	for {
		if s.nothingToSweep() {
			t.Stop()
			s.sweepParked.Store(true)
			select {
			case <-s.stop:
				return
			case <-s.sweepWake:
			}
			s.sweepParked.Store(false)
			t.Reset(expirySweepInterval)
		} else {
			select {
			case <-s.stop:
				return
			case <-t.C:
			case <-s.sweepWake: // drained: the sweep is running anyway
				continue
			}
		}
		now := nowMs()
		for _, v := range s.vhosts {
			for _, q := range v.all() {
				q.expireHead(now)
				if q.unusedFor(now) {
					if err := v.remove(q); err != nil {
						s.log.Error("amqp: delete an expired queue (x-expires)", "vhost", v.name, "queue", q.name, "err", err)
					}
				}
			}
		}
		s.checkBlocked()
		if tick++; tick%consumerTimeoutTicks == 0 {
			s.checkConsumerTimeouts(now)
		}
		if tick%streamRetentionTicks == 0 {
			s.retainStreams(now) // stream.go
		}
	}
}
