package amqp

import (
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// queueID is the one ConsumeQueue of an AMQP queue's topic.
const queueID = 0

// queue is one AMQP queue: a store topic with one ConsumeQueue, and the
// acknowledgement state over its offsets (see the package documentation).
type queue struct {
	v          *vhost
	name       string
	topic      string
	durable    bool
	autoDelete bool
	args       wire.Table
	a          queueArgs // args as acted on (args.go)
	owner      *conn     // exclusive to this connection; nil: shared

	mu          sync.Mutex // guards what follows; taken before a channel's mu
	consumers   []*consumer
	rr          int            // round-robin position in consumers
	prioritized int            // consumers with a priority other than 0
	hadConsumer bool           // auto-delete applies only after a first consumer
	floor       int64          // every offset below is settled
	settled     map[int64]bool // settled offsets >= floor
	cursor      int64          // next offset never handed out in this run
	returned    []int64        // requeued offsets, ascending: served before cursor
	inflight    map[int64]bool // handed out, not settled
	delivered   int64          // one past the highest offset ever handed out
	restoredD   int64          // delivered as restored: below it, a message may have been delivered before a restart
	leased      int64          // durable bound on delivered (the lease file): raised before a delivery would pass it
	leaseEarly  bool           // an early raise of the lease is being written (raiseLeaseEarly)
	dirty       bool           // the state changed since snapshot
	gone        bool
	returns     map[int64]int32 // times an unsettled offset was requeued (x-delivery-limit)
	dying       int             // offsets being dead-lettered (in inflight until their copy is stored)
	pendingPub  int             // publishes admitted by x-overflow=reject-publish, not yet stored
	pendingSize int64           // ... and their body bytes
	sizedTo     int64           // x-max-length-bytes: offsets below are counted in readyBytes (maxbytes.go)
	readyBytes  int64           // body bytes of the ready messages below sizedTo
	heldSize    map[int64]int64 // body bytes of unsettled offsets handed out since the start
	levels      [][]int64       // x-max-priority: ready offsets below cursor per priority, ascending (priority.go)
	heldPrio    map[int64]uint8 // x-max-priority: the level of unsettled offsets handed out since the start
	expSeen     bool            // a message with an expiration may be in the queue
	nextExpiry  int64           // ms: the head expires no earlier (0: look again)
	lastUsed    int64           // ms: last consumer gone, basic.get or declare (x-expires)

	parts map[int64]*entryParts // entries delivered as several messages (topicqueue.go)
	ahead readAhead             // records a pump read ahead (readahead.go)

	// leaseMu orders the writes of the lease file (taken after mu when
	// both are held); leaseDisk is what it last wrote there, leaseDone is
	// set when the file was trimmed at shutdown or removed with the queue:
	// an early raise then writes nothing.
	leaseMu   sync.Mutex
	leaseDisk int64
	leaseDone bool
	leaseFile leaseFile // the file open for writes in place (leasefile.go)

	stream *streamState // stream queues: each consumer's cursor (stream.go)

	// savedFloor is the floor acks.json holds (durable queues): what
	// retention may delete below (retention.go).
	savedFloor atomic.Int64
	stats      queueStats
}

// queueStats are a queue's counters since the broker started.
type queueStats struct {
	published    atomic.Uint64 // messages stored into the queue
	delivered    atomic.Uint64 // basic.deliver and basic.get-ok sent
	redelivered  atomic.Uint64 // ... of them with redelivered=true
	acked        atomic.Uint64 // settled by basic.ack (or no-ack delivery)
	deadLettered atomic.Uint64 // moved by their dead-letter copy
	dropped      atomic.Uint64 // expired, over x-max-length, rejected or over x-delivery-limit without a dead-letter copy
	refused      atomic.Uint64 // publishes refused by x-overflow=reject-publish
}

// consumer is one basic.consume.
type consumer struct {
	ch       *channel
	q        *queue
	tag      string
	noAck    bool
	prefetch int // 0: unlimited
	priority int // x-priority of basic.consume: the highest with credit is served first
	unacked  int // guarded by ch.mu
	// ready (guarded by ch.mu): basic.consume-ok was sent, deliveries may
	// follow; gone: the queue went before that (basic.cancel follows the
	// consume-ok).
	ready, gone bool
}

// delivery is a message handed out and not yet settled.
type delivery struct {
	q      *queue
	offset int64
	cons   *consumer // nil for basic.get
	at     int64     // ms: when it was handed out (Config.ConsumerTimeout)
}

func newQueue(v *vhost, name, topic string, durable, autoDelete bool, args wire.Table, a queueArgs, owner *conn) *queue {
	if args == nil {
		args = wire.Table{}
	}
	return &queue{v: v, name: name, topic: topic, durable: durable, autoDelete: autoDelete, args: args, a: a, owner: owner,
		settled: map[int64]bool{}, inflight: map[int64]bool{}, returns: map[int64]int32{}, lastUsed: nowMs()}
}

// persistent reports whether the queue survives a restart: durable and
// not exclusive (exclusive queues end with their connection).
func (q *queue) persistent() bool { return q.durable && q.owner == nil }

func (q *queue) restore(d ackDef, lease int64) {
	d.Delivered = max(d.Delivered, lease)
	q.floor, q.cursor, q.delivered, q.restoredD, q.leased = d.Floor, d.Floor, d.Delivered, d.Delivered, lease
	q.leaseDisk = lease
	q.savedFloor.Store(d.Floor)
	for _, o := range d.Settled {
		q.settled[o] = true
	}
	for o, n := range d.Returns {
		q.returns[o] = n
	}
	q.expSeen = true // the messages are not looked at before they are served
}

// markDirtyLocked notes a change of the acknowledgement state (q.mu held)
// and wakes the persist loop if it is parked.
func (q *queue) markDirtyLocked() {
	q.dirty = true
	q.v.srv.wakeAcks()
}

func (q *queue) snapshot() (ackDef, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := ackDef{Floor: q.floor, Delivered: q.delivered}
	for o := range q.settled {
		d.Settled = append(d.Settled, o)
	}
	slices.Sort(d.Settled)
	if len(q.returns) > 0 {
		d.Returns = maps.Clone(q.returns)
	}
	changed := q.dirty
	q.dirty = false
	return d, changed
}

func (q *queue) deleted() {
	q.mu.Lock()
	q.gone = true
	cs := q.consumers
	q.consumers = nil
	q.prioritized = 0
	q.mu.Unlock()
	for _, c := range cs {
		c.ch.consumerGone(c)
	}
}

// counts returns the ready messages and the consumers.
func (q *queue) counts() (uint32, uint32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return uint32(max(0, q.readyLocked())), uint32(len(q.consumers))
}

func (q *queue) readyLocked() int64 {
	hi := q.v.srv.store.MaxOffset(q.topic, queueID)
	if q.isStream() { // every message from the log start (stream.go)
		return hi - min(max(q.floor, q.v.srv.store.MinOffset(q.topic, queueID)), hi)
	}
	return hi - q.floor - int64(len(q.settled)) - int64(len(q.inflight))
}

// nextLocked picks the next offset to hand out: requeued ones first (the
// lowest: a message goes back to its place), then new ones.
func (q *queue) nextLocked() (int64, bool, bool) {
	if q.byPriority() {
		return q.prioNextLocked()
	}
	if len(q.returned) > 0 {
		o := q.returned[0]
		q.returned = q.returned[1:]
		return o, true, true
	}
	hi := q.v.srv.store.MaxOffset(q.topic, queueID)
	q.cursor = max(q.cursor, q.floor)
	for q.cursor < hi {
		o := q.cursor
		q.cursor++
		if q.settled[o] || q.inflight[o] {
			continue
		}
		return o, o < q.restoredD, true
	}
	return 0, false, false
}

// read returns the stored message at offset o; ok false if the store no
// longer has it (then it is settled: there is nothing to deliver).
func (q *queue) read(o int64) (storedMessage, func(), bool) {
	st := q.v.srv.store
	r, err := st.GetMessage(q.topic, queueID, o, 1, 0, nil)
	if err != nil || r.Status != store.Found || len(r.Records) == 0 {
		if r != nil {
			r.Release()
		}
		q.v.srv.log.Error("amqp: message missing from the store", "queue", q.name, "topic", q.topic, "offset", o, "err", err)
		return storedMessage{}, func() {}, false
	}
	m, err := q.parseRecord(o, r.Records[0]) // other protocols' records converted (topicqueue.go)
	if err != nil {
		r.Release()
		q.v.srv.log.Error("amqp: unreadable stored message", "queue", q.name, "offset", o, "err", err)
		return storedMessage{}, func() {}, false
	}
	return m, r.Release, true
}

// take hands out the next message for a delivery or a get.
func (q *queue) takeLocked() (int64, storedMessage, func(), bool, bool) {
	if o, m, redelivered, ok := q.nextPartLocked(); ok { // topicqueue.go
		return o, m, func() {}, redelivered, true
	}
	for {
		o, redelivered, ok := q.nextLocked()
		if !ok {
			return 0, storedMessage{}, nil, false, false
		}
		m, release, ok := q.readLocked(o)
		if !ok {
			q.leftReadyLocked(o, 0)
			q.settleLocked(o)
			continue
		}
		q.leftReadyLocked(o, int64(len(m.body)))
		if q.expiredLocked(&m, nowMs()) {
			release()
			q.deadLetterLocked(o, reasonExpired, nil)
			continue
		}
		if q.persistent() {
			switch {
			case o+1 > q.leased:
				q.raiseLeaseLocked(o + 1 + leaseStep)
			case o+1+leaseStep/2 > q.leased && !q.leaseEarly:
				// Half the lease is used: the next one is written off the
				// queue's lock, so that deliveries, publishes and acks
				// do not wait for its fsyncs.
				q.leaseEarly = true
				go q.raiseLeaseEarly(q.leased + leaseStep)
			}
		}
		q.inflight[o] = true
		if o+1 > q.delivered {
			q.delivered = o + 1
			q.markDirtyLocked()
		}
		if q.a.queueType == "quorum" && redelivered {
			m.props = q.deliveryCountLocked(o, m.props)
		}
		return o, m, release, redelivered, true
	}
}

// deliveryCountLocked returns the properties of a redelivery of offset o
// from a quorum queue: with the header x-delivery-count, the times the
// message was returned (requeued: a nack or reject with requeue, a closed
// channel, basic.recover), 1 on the first redelivery, as RabbitMQ's
// quorum queues. The counts are in acks.json: a clean restart keeps them
// (closing the channels counts their deliveries as returns). A message
// redelivered after a crash with no return recorded counts as returned
// once (the crash ended its delivery; under the lease it may also be one
// that was never delivered, as its redelivered flag says); a return
// recorded less than Config.AckStateInterval before a crash may be lost,
// so the count after a crash can be lower than the returns, never 0.
func (q *queue) deliveryCountLocked(o int64, props []byte) []byte {
	if q.returns[o] == 0 && o < q.restoredD {
		q.returns[o] = 1
		q.markDirtyLocked()
	}
	n := q.returns[o]
	if n == 0 {
		return props // requeued without having been delivered
	}
	var p wire.BasicProperties
	if p.Read(wire.NewReader(props)) != nil {
		return props // delivered as stored; the publisher's bytes were checked on publish
	}
	h := make(wire.Table, len(p.Headers)+1)
	maps.Copy(h, p.Headers)
	h["x-delivery-count"] = int64(n)
	p.Headers = h
	p.Flags |= wire.FlagHeaders
	var w wire.Writer
	p.Write(&w)
	return w.Buf
}

// pump delivers to consumers with credit while there are messages.
func (q *queue) pump() {
	if q.isStream() {
		q.pumpStream() // stream.go
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.nextExpiry = 0  // the head may have changed
	var conns []*conn // that hold deliveries back: flushed at the end
	defer func() {
		for _, c := range conns {
			c.flushHeld()
		}
	}()
	q.startAheadLocked() // readahead.go
	defer q.endAheadLocked()
	for !q.gone && len(q.consumers) > 0 {
		c, next := q.pickLocked()
		if c == nil {
			return
		}
		o, m, release, redelivered, ok := q.takeLocked()
		if !ok {
			return
		}
		q.rr = next // the turn moves on only with a delivery
		sent := c.ch.deliver(c, o, &m, redelivered)
		release()
		if sent && !slices.Contains(conns, c.ch.c) {
			conns = append(conns, c.ch.c)
		}
		if !sent {
			q.requeueLocked(o, false)
			continue
		}
		if c.noAck {
			q.settleLocked(o)
			q.stats.acked.Add(1)
		}
	}
}

// pickLocked returns the consumer to deliver to next, or nil: with
// x-single-active-consumer the first registered one (while it has
// credit), else the next in turn with credit among those of the highest
// priority (x-priority) that have credit; and the turn after it.
func (q *queue) pickLocked() (*consumer, int) {
	if q.a.single {
		if c := q.consumers[0]; c.ch.hasCredit(c) {
			return c, 0
		}
		return nil, 0
	}
	n := len(q.consumers)
	best := -1
	for i := range n {
		j := (q.rr + i) % n
		c := q.consumers[j]
		if best >= 0 && c.priority <= q.consumers[best].priority {
			continue
		}
		if c.ch.hasCredit(c) {
			best = j
			if q.prioritized == 0 {
				break // all of priority 0: the first in turn
			}
		}
	}
	if best < 0 {
		return nil, 0
	}
	return q.consumers[best], (best + 1) % n
}

// get implements basic.get's take.
func (q *queue) get() (int64, storedMessage, func(), bool, uint32, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lastUsed = nowMs()
	o, m, release, redelivered, ok := q.takeLocked()
	return o, m, release, redelivered, uint32(max(0, q.readyLocked())), ok
}

func (q *queue) settle(o int64) {
	if q.isStream() {
		return // an ack only gives credit back (stream.go)
	}
	q.mu.Lock()
	q.settleLocked(o)
	q.mu.Unlock()
}

// reject settles a delivered message rejected without requeue: it is
// dead-lettered (deadletter.go); c's methods after the reject see the
// copy (conn.waitPublishes).
func (q *queue) reject(o int64, c *conn) {
	if q.isStream() {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.inflight[o] {
		return
	}
	c.pendingDL.Add(1)
	q.deadLetterLocked(o, reasonRejected, c.deadLetterDone)
}

func (q *queue) settleLocked(o int64) {
	if q.partDoneLocked(o, false) { // topicqueue.go
		return
	}
	delete(q.inflight, o)
	delete(q.returns, o)
	delete(q.heldSize, o)
	delete(q.heldPrio, o)
	q.markDirtyLocked()
	if o != q.floor {
		if o > q.floor {
			q.settled[o] = true
		}
		return
	}
	q.floor++
	for q.settled[q.floor] {
		delete(q.settled, q.floor)
		q.floor++
	}
}

// requeue puts a delivered message back (nack or reject with requeue, a
// closed channel, basic.recover): it counts towards x-delivery-limit.
func (q *queue) requeue(o int64) {
	if q.isStream() {
		return // the message stays in the stream
	}
	q.mu.Lock()
	q.requeueLocked(o, true)
	q.mu.Unlock()
}

// requeueLocked puts o back at its place; counted: as a return of a
// delivered message (beyond x-delivery-limit returns it is dead-lettered
// instead).
func (q *queue) requeueLocked(o int64, counted bool) {
	if !q.inflight[o] || q.partDoneLocked(o, true) { // topicqueue.go
		return
	}
	if counted {
		q.returns[o]++
		q.markDirtyLocked()
		if q.a.deliveryLimit >= 0 && int64(q.returns[o]) > q.a.deliveryLimit {
			q.deadLetterLocked(o, reasonDeliveryLimit, nil)
			return
		}
	}
	delete(q.inflight, o)
	if q.byPriority() {
		q.prioRequeueLocked(o)
	} else {
		i, _ := slices.BinarySearch(q.returned, o)
		q.returned = slices.Insert(q.returned, i, o)
	}
	q.backToReadyLocked(o)
}

// purge settles every ready message and returns how many.
func (q *queue) purge() uint32 {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := uint32(0)
	if q.byPriority() {
		n = q.prioPurgeLocked()
	}
	for _, o := range q.returned {
		q.settleLocked(o)
		n++
	}
	q.returned = nil
	hi := q.v.srv.store.MaxOffset(q.topic, queueID)
	for o := max(q.cursor, q.floor); o < hi; o++ {
		if !q.settled[o] && !q.inflight[o] {
			q.settleLocked(o)
			n++
		}
	}
	q.cursor = hi
	q.readyBytes, q.sizedTo = 0, max(q.sizedTo, hi)
	return n
}

func (q *queue) addConsumer(c *consumer) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.gone {
		return false
	}
	q.consumers = append(q.consumers, c)
	if c.priority != 0 {
		q.prioritized++
	}
	q.hadConsumer = true
	return true
}

// removeConsumer drops c; it reports whether the queue should now be
// auto-deleted.
func (q *queue) removeConsumer(c *consumer) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(q.consumers, c); i >= 0 {
		q.consumers = slices.Delete(q.consumers, i, i+1)
		if c.priority != 0 {
			q.prioritized--
		}
	}
	if q.stream != nil {
		delete(q.stream.readers, c)
	}
	q.lastUsed = nowMs()
	return q.autoDelete && q.hadConsumer && len(q.consumers) == 0 && !q.gone
}

// leaseStep is how far ahead of the deliveries the lease is written: one
// small durable write per leaseStep first deliveries of a durable queue.
const leaseStep = 256

func (q *queue) leasePath() string { return filepath.Join(q.v.dir, "lease-"+q.topic) }

// raiseLeaseLocked (which also lowers it, at a clean shutdown) durably records that offsets below to may have been
// delivered, before any of them is: after a crash, every unsettled offset
// below the lease is served with redelivered=true, so the flag is never
// missing (it may be set on a message the crash kept from being
// delivered, which the specification's "may have been delivered"
// allows). A failed write is logged and the delivery goes on.
func (q *queue) raiseLeaseLocked(to int64) {
	if !q.writeLease(to, false) {
		return
	}
	q.setLeaseLocked(to)
}

// setLeaseLocked makes to the lease once its file says so: logged for the
// slaves first (replicate.go).
func (q *queue) setLeaseLocked(to int64) {
	if to != q.leased {
		if err := q.logLeaseLocked(to); err != nil { // replicate.go: on the slaves too
			q.v.srv.log.Error("amqp: log the delivery lease", "queue", q.name, "err", err)
		}
	}
	q.leased = to
}

// writeLease durably writes to as the lease file's value. An early raise
// writes only a value above the file's and nothing once the file was
// trimmed or removed (leaseDone); it reports whether it wrote.
func (q *queue) writeLease(to int64, early bool) bool {
	q.leaseMu.Lock()
	defer q.leaseMu.Unlock()
	if early && (q.leaseDone || to <= q.leaseDisk) {
		return false
	}
	var err error
	if q.v.srv.cfg.SystemRecords {
		// The Mirror writes this file too, from the lease records
		// (replicate.go): whole, as it does.
		q.leaseFile.close()
		err = vfs.WriteFileDurable(q.v.srv.cfg.FS, q.leasePath(), []byte(strconv.FormatInt(to, 10)), 0o644)
	} else {
		err = q.leaseFile.write(q.v.srv.cfg.FS, q.leasePath(), to)
	}
	if err != nil {
		q.v.srv.log.Error("amqp: write the delivery lease", "queue", q.name, "err", err)
		return false
	}
	q.leaseDisk = to
	return true
}

// raiseLeaseEarly raises the lease to to before the deliveries need it,
// without the queue's lock while the file is written; deliveries reach
// the new lease only once it is durable (and logged), as with
// raiseLeaseLocked.
func (q *queue) raiseLeaseEarly(to int64) {
	wrote := q.writeLease(to, true)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.leaseEarly = false
	if wrote && to > q.leased && !q.gone {
		q.setLeaseLocked(to)
	}
}

// trimLease lowers the lease to what was really delivered (a clean
// shutdown), so a restart flags exactly the messages handed out before.
func (q *queue) trimLease() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.persistent() && q.leased > q.delivered {
		q.raiseLeaseLocked(q.delivered)
	}
	q.leaseMu.Lock()
	q.leaseDone = true // no early raise after the trim
	q.leaseFile.close()
	q.leaseMu.Unlock()
}
