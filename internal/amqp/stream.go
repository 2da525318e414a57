package amqp

// Stream queues (x-queue-type=stream, RabbitMQ 3.9+'s semantics over
// AMQP 0-9-1). A stream is a queue whose messages are not taken away by
// consumers: it is the log of its topic's queue 0 (its own topic, or the
// Keel topic x-keel-topic names, so that Kafka and RocketMQ consumers
// read the same messages at the same offsets: a Kafka partition offset
// is the ConsumeQueue offset), read by each consumer from where its
// basic.consume's x-stream-offset says:
//
//	first       the log start
//	last        the last message stored (RabbitMQ: the last chunk)
//	next        what is stored after the consume (the default)
//	an integer  that offset (the log start if below it, next if past the end)
//	a timestamp (AMQP type T, seconds) the first message stored at or after it
//	"1D", "30m" an interval (Y M D h m s): that long before now
//
// Each consumer has its own cursor (streamState.readers, memory only: a
// consumer is a session, as in RabbitMQ); every delivery carries the
// header x-stream-offset (long). An ack only gives the consumer its
// prefetch credit back; nack, reject and basic.get are refused with
// RabbitMQ's 540. The queue's floor is the stream's log start, moved by
// x-max-age and x-max-length-bytes (retainStream, once a second) and
// written with the acknowledgement state (acks.json); a stream holds
// nothing against the store's retention (retention.go), which deletes
// its oldest segments as for any topic: the log start is the later of
// the floor and the ConsumeQueue's MinOffset.

import (
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
)

// streamOffsetHeader is the header each delivery of a stream carries,
// and the basic.consume argument choosing where a consumer starts.
const streamOffsetHeader = "x-stream-offset"

// streamArgs are a stream's retention arguments.
type streamArgs struct {
	maxAge   time.Duration // x-max-age; 0: none
	maxBytes int64         // x-max-length-bytes; -1: none
}

// streamState is a stream queue's per-consumer state; q.mu guards it.
type streamState struct {
	readers map[*consumer]*streamReader
	// bytes is the stored size of entries [from, to), kept for
	// x-max-length-bytes and extended each round.
	from, to, bytes int64
}

type streamReader struct {
	next int64 // next offset to deliver
	part int   // next message of a multi-message entry at next (a Kafka batch of an earlier release)
}

func (q *queue) isStream() bool { return q.a.queueType == "stream" }

// streamLocked returns the stream state, made on first use; q.mu is held.
func (q *queue) streamLocked() *streamState {
	if q.stream == nil {
		q.stream = &streamState{readers: map[*consumer]*streamReader{}}
	}
	return q.stream
}

// streamIgnored are the queue arguments a stream does not act on and
// RabbitMQ does not offer for streams: refused rather than ignored.
var streamIgnored = []string{"x-message-ttl", "x-dead-letter-exchange", "x-dead-letter-routing-key", "x-max-length",
	"x-overflow", "x-delivery-limit", "x-expires", "x-max-priority", "x-single-active-consumer", "x-queue-mode"}

// parseStreamArgs reads a stream's arguments (after parseQueueArgs read
// the common ones): x-max-age, x-max-length-bytes; arguments only other
// queue types act on are refused. x-stream-max-segment-size-bytes,
// x-initial-cluster-size and x-queue-leader-locator are kept and not
// acted on (one store, no segments of its own).
func parseStreamArgs(t wire.Table) (streamArgs, error) {
	a := streamArgs{maxBytes: -1}
	for _, k := range streamIgnored {
		if _, ok := t[k]; ok {
			return a, fmt.Errorf("invalid arg '%s' for a stream queue (not supported by stream queues)", k)
		}
	}
	var err error
	if a.maxBytes, err = nonNegative(t, "x-max-length-bytes"); err != nil {
		return a, err
	}
	if v, ok, err := stringArg(t, "x-max-age"); err != nil {
		return a, err
	} else if ok {
		if a.maxAge, err = parseMaxAge(v); err != nil || a.maxAge <= 0 {
			return a, fmt.Errorf("invalid arg 'x-max-age': %q (a positive number and one of Y M D h m s, as 7D)", v)
		}
	}
	return a, nil
}

var maxAgeRE = regexp.MustCompile(`^([0-9]{1,9})([YMDhms])$`)

// parseMaxAge reads RabbitMQ's interval syntax: a number and a unit
// (Y 365 days, M 30 days, D, h, m, s).
func parseMaxAge(s string) (time.Duration, error) {
	m := maxAgeRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("bad interval %q", s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	unit := map[string]time.Duration{"Y": 365 * 24 * time.Hour, "M": 30 * 24 * time.Hour, "D": 24 * time.Hour,
		"h": time.Hour, "m": time.Minute, "s": time.Second}[m[2]]
	return time.Duration(n) * unit, nil
}

// streamDeclareCheck refuses a stream that is not durable, or exclusive,
// or auto-delete, with RabbitMQ's texts and in its order.
func streamDeclareCheck(m *wire.QueueDeclare, name, vhost string) error {
	var prop string
	switch {
	case m.AutoDelete:
		prop = "auto-delete"
	case m.Exclusive:
		prop = "exclusive"
	case !m.Durable:
		prop = "non-durable"
	default:
		return nil
	}
	return soft(wire.PreconditionFailed, m, "invalid property '%s' for queue '%s' in vhost '%s'", prop, name, vhost)
}

// rs names a queue as RabbitMQ's error texts do.
func (q *queue) rs() string { return fmt.Sprintf("queue '%s' in vhost '%s'", q.name, q.v.name) }

// streamConsume checks a basic.consume of a stream as RabbitMQ does and
// returns the offset its consumer starts at.
func (ch *channel) streamConsume(m *wire.BasicConsume, q *queue) (int64, error) {
	ch.mu.Lock()
	prefetch, global := ch.prefetch, ch.globalPrefetch
	ch.mu.Unlock()
	if prefetch == 0 {
		return 0, soft(wire.PreconditionFailed, m, "consumer prefetch count is not set for '%s'", q.rs())
	}
	if m.NoAck {
		return 0, hard(wire.NotImplemented, m, "automatic acknowledgement not supported by stream queues %s", q.rs())
	}
	if global != 0 {
		return 0, hard(wire.NotImplemented, m, "%s does not support global qos", q.rs())
	}
	start, err := q.streamStart(m.Arguments[streamOffsetHeader], nowMs())
	if err != nil {
		return 0, soft(wire.PreconditionFailed, m, "invalid arg '%s' for %s: %v", streamOffsetHeader, q.rs(), err)
	}
	return start, nil
}

// streamStart resolves an x-stream-offset value (nil: next) at nowMs.
func (q *queue) streamStart(v any, nowMs int64) (int64, error) {
	st := q.v.srv.store
	hi := st.MaxOffset(q.topic, queueID)
	byTime := func(ms int64) int64 { return max(st.OffsetByTime(q.topic, queueID, ms), q.logStart()) }
	switch v := v.(type) {
	case nil:
		return hi, nil
	case []byte, string:
		s := tableString(v)
		switch s {
		case "first":
			return q.logStart(), nil
		case "last":
			return max(q.logStart(), hi-1), nil
		case "next":
			return hi, nil
		}
		d, err := parseMaxAge(s)
		if err != nil {
			return 0, fmt.Errorf("%q is not first, last, next, an offset, a timestamp or an interval (as 1h)", s)
		}
		return byTime(nowMs - d.Milliseconds()), nil
	case wire.Timestamp:
		return byTime(int64(v) * 1000), nil
	}
	n, ok := intValue(v)
	if !ok {
		return 0, fmt.Errorf("%v (%T) is not first, last, next, an offset, a timestamp or an interval", tableString(v), v)
	}
	if n < 0 {
		return 0, fmt.Errorf("offset %d is negative", n)
	}
	return min(n, hi), nil // past the end: next; below the log start: moved up to it when read
}

// logStart is the stream's first offset still served: its floor (moved
// by its retention) or the ConsumeQueue's first entry, the later.
func (q *queue) logStart() int64 {
	st := q.v.srv.store
	q.mu.Lock()
	floor := q.floor
	q.mu.Unlock()
	return min(max(floor, st.MinOffset(q.topic, queueID)), st.MaxOffset(q.topic, queueID))
}

// addReader gives consumer c of the stream its cursor (before it is
// added to the queue).
func (q *queue) addReader(c *consumer, start int64) {
	q.mu.Lock()
	q.streamLocked().readers[c] = &streamReader{next: start}
	q.mu.Unlock()
}

// streamUnackedLocked counts the deliveries the stream's consumers have
// not acknowledged yet; q.mu is held.
func (q *queue) streamUnackedLocked() int64 {
	n := 0
	for _, c := range q.consumers {
		c.ch.mu.Lock()
		n += c.unacked
		c.ch.mu.Unlock()
	}
	return int64(n)
}

// pumpStream delivers to each consumer with credit from its own cursor,
// one message per consumer in turn, while there are messages.
func (q *queue) pumpStream() {
	q.mu.Lock()
	defer q.mu.Unlock()
	var conns []*conn
	defer func() {
		for _, c := range conns {
			c.flushHeld()
		}
	}()
	st := q.v.srv.store
	s := q.streamLocked()
	for progress := true; progress && !q.gone; {
		progress = false
		hi := st.MaxOffset(q.topic, queueID)
		start := min(max(q.floor, st.MinOffset(q.topic, queueID)), hi)
		for _, c := range q.consumers {
			r := s.readers[c]
			if r == nil {
				continue
			}
			if r.next < start {
				r.next, r.part = start, 0
			}
			if r.next >= hi || !c.ch.hasCredit(c) {
				continue
			}
			m, release, ok := q.streamRead(r)
			if !ok {
				progress = true // unreadable (logged): skipped
				continue
			}
			sent := c.ch.deliver(c, r.next, &m, false)
			release()
			if !sent {
				continue
			}
			progress = true
			if r.part == 0 { // a whole entry delivered
				r.next++
			}
			if !containsConn(conns, c.ch.c) {
				conns = append(conns, c.ch.c)
			}
		}
	}
}

func containsConn(cs []*conn, c *conn) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// streamRead reads the message at r's cursor with its x-stream-offset
// header. An entry of several messages (a Kafka batch stored by an
// earlier release) gives them one after the other (r.part; each with the
// entry's offset); r.part is 0 again after its last. A message that
// cannot be read moves the cursor past it. q.mu is held.
func (q *queue) streamRead(r *streamReader) (storedMessage, func(), bool) {
	o := r.next
	m, release, ok := q.read(o)
	if !ok {
		r.next, r.part = o+1, 0
		return storedMessage{}, nil, false
	}
	if p := q.parts[o]; p != nil { // parseRecord split the entry (topicqueue.go): its messages are ours to walk
		delete(q.parts, o)
		all := append([]storedMessage{m}, p.pending...)
		m = all[r.part]
		if r.part++; r.part == len(all) {
			r.part = 0
		}
	} else {
		r.part = 0
	}
	props, err := withStreamOffset(m.props, o)
	if err != nil {
		release()
		q.v.srv.log.Error("amqp: unreadable properties of a stream message", "queue", q.name, "offset", o, "err", err)
		r.next, r.part = o+1, 0
		return storedMessage{}, nil, false
	}
	m.props = props
	return m, release, true
}

// withStreamOffset returns the content properties raw with the header
// x-stream-offset (long) set to o.
func withStreamOffset(raw []byte, o int64) ([]byte, error) {
	var p wire.BasicProperties
	if len(raw) > 0 {
		if err := p.Read(wire.NewReader(raw)); err != nil {
			return nil, err
		}
	}
	h := make(wire.Table, len(p.Headers)+1)
	for k, v := range p.Headers {
		h[k] = v
	}
	h[streamOffsetHeader] = o
	p.Headers = h
	p.Flags |= wire.FlagHeaders
	var w wire.Writer
	p.Write(&w)
	return w.Buf, nil
}

// streamReject refuses basic.nack and basic.reject of stream deliveries,
// as RabbitMQ does (540: a connection exception).
func streamReject(m wire.Method, ds []delivery) error {
	for _, d := range ds {
		if d.q.isStream() {
			return hard(wire.NotImplemented, m, "basic.nack and basic.reject not supported by stream queues %s", d.q.rs())
		}
	}
	return nil
}

// streamRetentionTicks is how many sweeps (expirySweepInterval) pass
// between two rounds of stream retention.
const streamRetentionTicks = 20

// maxStreamScan bounds the entries one retention round reads per stream
// to count its bytes (a long stream is counted over several rounds).
const maxStreamScan = 100_000

// retainStreams applies every stream's x-max-age and x-max-length-bytes.
func (s *Server) retainStreams(now int64) {
	for _, v := range s.vhosts {
		for _, q := range v.all() {
			if q.isStream() && (q.a.stream.maxAge > 0 || q.a.stream.maxBytes >= 0) {
				if err := q.retainStream(now); err != nil {
					s.log.Error("amqp: stream retention: the log start stays", "queue", q.name, "err", err)
				}
			}
		}
	}
}

// retainStream moves the stream's log start (its floor) past the
// messages older than x-max-age (by store time) and past the oldest
// messages while the stream holds more than x-max-length-bytes (stored
// record bytes; the newest message is always kept). The new floor is
// written with the acknowledgement state; a move lost in a crash is
// made again by the next round.
func (q *queue) retainStream(now int64) error {
	st := q.v.srv.store
	start, hi := q.logStart(), st.MaxOffset(q.topic, queueID)
	to := start
	if q.a.stream.maxAge > 0 {
		to = max(to, min(st.OffsetByTime(q.topic, queueID, now-q.a.stream.maxAge.Milliseconds()), hi))
	}
	if q.a.stream.maxBytes >= 0 {
		b, err := q.streamBytesFrom(start, hi, maxStreamScan)
		if err != nil {
			return err
		}
		to = max(to, b)
	}
	if to <= start {
		return nil
	}
	q.mu.Lock()
	if to > q.floor {
		q.floor = to
		q.markDirtyLocked()
	}
	q.mu.Unlock()
	q.pump() // consumers behind the new log start go on from it
	return nil
}

// streamBytesFrom counts the stored bytes of [start, hi) (incrementally:
// the count of the last round is extended by at most scan entries) and
// returns the first offset to keep for x-max-length-bytes
// (start if the count is not complete yet).
func (q *queue) streamBytesFrom(start, hi int64, scan int) (int64, error) {
	st := q.v.srv.store
	q.mu.Lock()
	s := q.streamLocked()
	from, to, total := s.from, s.to, s.bytes
	q.mu.Unlock()
	buf := make([]store.QueueEntry, 1024)
	size := func(o int64, n int) ([]store.QueueEntry, error) {
		k, err := st.QueueEntries(q.topic, queueID, o, buf[:min(n, len(buf))])
		if err != nil {
			return nil, err
		}
		if k == 0 {
			return nil, fmt.Errorf("no entry at %d below %d", o, hi)
		}
		return buf[:k], nil
	}
	if from < start && start <= to && to <= hi { // the log start moved (x-max-age): the entries it passed leave the count
		for from < start {
			es, err := size(from, int(start-from))
			if err != nil {
				from = to + 1 // below the store's first entry: counted again below
				break
			}
			for _, e := range es {
				total -= int64(e.Size)
			}
			from += int64(len(es))
		}
	}
	if from != start || to < from || to > hi { // moved by the store, or never counted
		from, to, total = start, start, 0
	}
	for scanned := 0; to < hi && scanned < scan; {
		es, err := size(to, int(hi-to))
		if err != nil {
			return start, err
		}
		for _, e := range es {
			total += int64(e.Size)
		}
		to += int64(len(es))
		scanned += len(es)
	}
	keep := start
	if to == hi {
		for total > q.a.stream.maxBytes && keep < hi-1 {
			es, err := size(keep, int(hi-1-keep))
			if err != nil {
				return start, err
			}
			for _, e := range es {
				if total <= q.a.stream.maxBytes || keep >= hi-1 {
					break
				}
				total -= int64(e.Size)
				keep++
			}
		}
	}
	q.mu.Lock()
	s.from, s.to, s.bytes = keep, to, total
	q.mu.Unlock()
	return keep, nil
}
