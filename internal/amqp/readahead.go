package amqp

import (
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
)

// Reading ahead for a pump. A pump delivering several messages of a queue
// (a batch just stored, the credit a burst of acks gave back) reads the
// records of the offsets after the one it needs with the same
// store.GetMessage, so that n deliveries cost one read of the CommitLog,
// not n. What it read is kept only while the pump runs (the buffers go
// back to the store's pool at its end) and only for offsets whose record
// says it is theirs, each record verified by the store as any it returns.

// readAheadMax bounds the records read at once: at most one pooled read
// buffer (readAheadBytes) of them.
const (
	readAheadMax   = 64
	readAheadBytes = 256 << 10
)

// readAhead is a queue's read-ahead while a pump runs (under the queue's
// mu): on is set for the pump's length; res holds the records of the
// offsets from, from+1, ... (recs[i] is offset from+i's record).
type readAhead struct {
	on   bool
	res  *store.GetResult
	from int64
	recs [][]byte
	// like holds the exchange and routing key of the message parsed
	// last (parseAhead), kept across pumps.
	like storedMessage
}

// startAheadLocked lets the pump's reads read ahead (q.mu held). A queue
// whose messages are not read in offset order (priorities), or over a Keel
// topic whose records may be other protocols' (topicqueue.go), reads one
// message at a time as before.
func (q *queue) startAheadLocked() {
	q.ahead.on = q.ownsTopic() && !q.byPriority()
}

// endAheadLocked gives back what the pump read ahead (q.mu held).
func (q *queue) endAheadLocked() {
	q.dropAheadLocked()
	q.ahead.on = false
}

func (q *queue) dropAheadLocked() {
	if q.ahead.res != nil {
		q.ahead.res.Release()
	}
	clear(q.ahead.recs)
	q.ahead.res, q.ahead.recs = nil, q.ahead.recs[:0]
}

// readLocked is read for a take (q.mu held): from what the pump read
// ahead if it holds offset o; else, while a pump runs, o and the offsets
// after it that the consumers have credit for are read with one
// GetMessage. The release it returns does nothing for a record read
// ahead (the pump's end gives the buffers back).
func (q *queue) readLocked(o int64) (storedMessage, func(), bool) {
	a := &q.ahead
	if !a.on {
		return q.read(o)
	}
	if rec := a.record(o); rec != nil {
		return q.parseAhead(o, rec)
	}
	q.dropAheadLocked()
	want := q.aheadWantLocked(o)
	if want <= 1 {
		return q.read(o)
	}
	r, err := q.v.srv.store.GetMessage(q.topic, queueID, o, want, readAheadBytes, nil)
	if err != nil || r.Status != store.Found {
		if r != nil {
			r.Release()
		}
		return q.read(o) // as a read of o alone answers (and logs) it
	}
	a.res, a.from = r, o
	for i, rec := range r.Records {
		if !recordOf(rec, q.topic, o+int64(i)) {
			break // a record skipped (isolated, removed): the rest is read again when needed
		}
		a.recs = append(a.recs, rec)
	}
	if rec := a.record(o); rec != nil {
		return q.parseAhead(o, rec)
	}
	q.dropAheadLocked()
	return q.read(o)
}

func (a *readAhead) record(o int64) []byte {
	if a.res == nil || o < a.from || o >= a.from+int64(len(a.recs)) {
		return nil
	}
	return a.recs[o-a.from]
}

// parseAhead is read's parse of a record read ahead (an AMQP record: the
// queue owns its topic), taking the exchange and routing key strings of
// the message parsed before where they are the same.
func (q *queue) parseAhead(o int64, rec []byte) (storedMessage, func(), bool) {
	m, err := parseMessageLike(rec, q.topic, o, &q.ahead.like)
	if err != nil {
		q.v.srv.log.Error("amqp: unreadable stored message", "queue", q.name, "offset", o, "err", err)
		return storedMessage{}, func() {}, false
	}
	q.ahead.like = storedMessage{exchange: m.exchange, routingKey: m.routingKey}
	return m, func() {}, true
}

// recordOf reports whether rec, an AMQP record, is the record of offset
// o of topic's queue (one of its destinations says so).
func recordOf(rec []byte, topic string, o int64) bool {
	if t, err := record.TypeOf(rec); err != nil || t != record.AMQP || record.CheckEnvelope(rec) != nil {
		return false
	}
	found := false
	record.Envelope(rec).EachDest(func(_ int, t []byte, qid int32, qo, _ int64, _ int) error {
		found = found || (qid == queueID && qo == o && string(t) == topic)
		return nil
	})
	return found
}

// aheadWantLocked is how many messages from offset o on a read should
// fetch: what the queue's consumers have credit for (at most
// readAheadMax), and only o while requeued messages are served (they are
// not in offset order).
func (q *queue) aheadWantLocked(o int64) int {
	if len(q.returned) > 0 {
		return 1
	}
	want := 0
	for _, c := range q.consumers {
		want += c.ch.credit(c, readAheadMax)
		if want >= readAheadMax {
			break
		}
	}
	hi := q.v.srv.store.MaxOffset(q.topic, queueID)
	return int(min(int64(min(want, readAheadMax)), hi-o))
}
