package amqp

// Queues over a Keel topic (docs/cross-protocol.md): a queue declared
// with the argument x-keel-topic (a string) is stored in queue 0 of that
// topic instead of a topic of its own, so that RocketMQ and Kafka
// producers feed it and RocketMQ and Kafka consumers read what AMQP
// publishers route to it. Its acknowledgement state is its own, over
// that ConsumeQueue's offsets, as for any queue; a RocketMQ or Kafka
// consumer group keeps its own offsets. Records of other protocols are
// converted on delivery (package translate). A Kafka batch has one entry
// per record: each entry delivers its record and is settled on its own
// (the batch is decoded once while its entries are read, memoized per
// queue); a batch stored by an earlier release, one entry for all its
// records, delivers them one by one and they settle the entry together.
// Deleting the queue keeps the topic. One AMQP queue per topic.

import (
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
)

// ArgKeelTopic is the queue.declare argument naming the topic a queue is
// stored in.
const ArgKeelTopic = "x-keel-topic"

var topicNameRE = regexp.MustCompile(`^[%|a-zA-Z0-9_-]{1,127}$`)

// keelTopic returns the topic an x-keel-topic argument names, "" if the
// queue has none.
func keelTopic(args wire.Table) (string, error) {
	v, ok := args[ArgKeelTopic]
	if !ok {
		return "", nil
	}
	var name string
	switch s := v.(type) {
	case []byte:
		name = string(s)
	case string:
		name = s
	default:
		return "", fmt.Errorf("%s must be a string, not %T", ArgKeelTopic, v)
	}
	if !topicNameRE.MatchString(name) || name[0] == '%' {
		return "", fmt.Errorf("%s %q is not a topic name (1-127 of a-z A-Z 0-9 _ - |)", ArgKeelTopic, name)
	}
	return name, nil
}

// queueTopic is the store topic of a new queue declared by m: the
// x-keel-topic if given (refused if another queue already has it), else a
// fresh one. v.mu is held.
func (v *vhost) queueTopic(m *wire.QueueDeclare) (string, error) {
	t, err := keelTopic(m.Arguments)
	if err != nil {
		return "", soft(wire.PreconditionFailed, m, "%v", err)
	}
	if t == "" {
		return newTopic(), nil
	}
	for _, q := range v.queues {
		if q.topic == t {
			return "", soft(wire.PreconditionFailed, m, "topic '%s' already feeds queue '%s' in vhost '%s' (one queue per topic)", t, q.name, v.name)
		}
	}
	if tq, ok := v.srv.topics.queues.Load(t); ok { // a queue of another vhost
		q := tq.(*topicQueue).q
		return "", soft(wire.PreconditionFailed, m, "topic '%s' already feeds queue '%s' in vhost '%s' (one queue per topic)", t, q.name, q.v.name)
	}
	return t, nil
}

// ownsTopic reports whether the queue's topic is its own (deleted with
// it), not a Keel topic it was declared over.
func (q *queue) ownsTopic() bool {
	t, _ := keelTopic(q.args)
	return t == ""
}

// topicWatch wakes the queues over Keel topics when another front door
// adds to their topic (the store's OnVisible events; AMQP publishes wake
// their queues themselves).
type topicWatch struct {
	queues sync.Map // topic -> *topicQueue
	remove func()
}

type topicQueue struct {
	q       *queue
	pending atomic.Bool
}

// watchTopics tracks the restored queues over Keel topics and subscribes
// to the store's events.
func (s *Server) watchTopics() {
	for _, v := range s.vhosts {
		v.mu.Lock()
		for _, q := range v.queues {
			s.trackTopic(q, false)
		}
		v.mu.Unlock()
	}
	s.topics.remove = s.store.OnVisible(func(topic string, qid int32, _, _ int64) {
		if qid != queueID {
			return
		}
		v, ok := s.topics.queues.Load(topic)
		if !ok {
			return
		}
		tq := v.(*topicQueue)
		if tq.pending.CompareAndSwap(false, true) { // one pump in flight per queue: events coalesce
			go func() {
				tq.pending.Store(false)
				tq.q.pump()
			}()
		}
	})
}

// trackTopic registers a queue over a Keel topic; a queue just declared
// (fresh) starts at the topic's end: as any AMQP queue, it gets the
// messages that arrive once it exists.
func (s *Server) trackTopic(q *queue, fresh bool) {
	if q.ownsTopic() {
		return
	}
	if fresh && !q.isStream() { // a stream starts at its topic's log start (stream.go)
		q.mu.Lock()
		end := s.store.MaxOffset(q.topic, queueID)
		q.floor, q.cursor, q.delivered, q.restoredD = end, end, end, end
		q.markDirtyLocked()
		q.mu.Unlock()
		if q.persistent() && end > 0 {
			// Written now rather than at the next interval: restored without
			// it, the queue would start at the topic's first message. (The
			// caller holds vhost.mu, which saveAcks takes.)
			go func() {
				if err := q.v.saveAcks(); err != nil {
					s.log.Error("amqp: write the acknowledgement state", "queue", q.name, "err", err)
				}
			}()
		}
	}
	s.topics.queues.Store(q.topic, &topicQueue{q: q})
}

// untrackTopic forgets a deleted queue over a Keel topic.
func (s *Server) untrackTopic(q *queue) {
	if v, ok := s.topics.queues.Load(q.topic); ok && v.(*topicQueue).q == q {
		s.topics.queues.CompareAndDelete(q.topic, v)
	}
	batchMemos.Delete(q)
}

// parseRecord decodes the record at offset o of a queue: an AMQP record,
// or in a queue over a Keel topic a record of another protocol,
// converted. A Kafka batch with one entry per record gives entry o its
// record. A Kafka batch of an earlier release (one entry) is delivered
// record by record: the first is returned, the others wait in q.parts,
// handed out before any other offset, and the entry is settled once
// every record is (requeued as a whole, every record again, if one was
// requeued). q.mu is held.
func (q *queue) parseRecord(o int64, rec []byte) (storedMessage, error) {
	t, err := record.TypeOf(rec)
	if err != nil || t == record.AMQP || q.ownsTopic() {
		return parseMessage(rec, q.topic, o)
	}
	if t.Enveloped() && record.CheckEnvelope(rec) == nil && record.Envelope(rec).Flags()&record.FlagEntryPerMessage != 0 {
		return q.entryMessage(o, rec)
	}
	ms, err := foreignMessages(rec, q.topic)
	if err != nil {
		return storedMessage{}, err
	}
	ts := foreignStoreTime(t, rec) // for x-message-ttl
	for i := range ms {
		ms[i].storeTs = ts
	}
	if len(ms) > 1 {
		if q.parts == nil {
			q.parts = map[int64]*entryParts{}
		}
		q.parts[o] = &entryParts{left: len(ms), pending: ms[1:], redelivered: o < q.delivered} // handed out before: a redelivery
	}
	return ms[0], nil
}

// batchMemos holds, per queue over a Keel topic, the messages of the
// Kafka batch its entries were last read from (*queue -> *batchMemo), so
// that reading a batch of n records entry by entry decodes it once, not n
// times. A memo is used and replaced under its queue's mu; untrackTopic
// drops it.
var batchMemos sync.Map

type batchMemo struct {
	phys  int64 // the batch's CommitLog offset
	first int64 // its first entry
	ms    []storedMessage
}

// entryMessage is the message entry o designates in rec, a record with
// one entry per message: message o minus the record's first entry. q.mu
// is held.
func (q *queue) entryMessage(o int64, rec []byte) (storedMessage, error) {
	e := record.Envelope(rec)
	v, _ := batchMemos.Load(q)
	m, _ := v.(*batchMemo)
	if m == nil || m.phys != e.PhysOffset() {
		first, ok := translate.QueueOffset(rec, q.topic, queueID)
		if !ok {
			return storedMessage{}, fmt.Errorf("amqp: the record at %d has no destination %s/%d", e.PhysOffset(), q.topic, queueID)
		}
		ms, err := foreignMessages(rec, q.topic)
		if err != nil {
			return storedMessage{}, err
		}
		if len(ms) == 1 {
			ms[0].body = append([]byte(nil), ms[0].body...) // kept past the read
		}
		for i := range ms {
			ms[i].storeTs = e.StoreTimestamp() // for x-message-ttl
		}
		m = &batchMemo{phys: e.PhysOffset(), first: first, ms: ms}
		batchMemos.Store(q, m)
	}
	i := o - m.first
	if i < 0 || i >= int64(len(m.ms)) {
		return storedMessage{}, fmt.Errorf("amqp: entry %d of %s locates a batch of %d records from entry %d", o, q.topic, len(m.ms), m.first)
	}
	return m.ms[i], nil
}

// entryParts is an entry delivered as several messages.
type entryParts struct {
	left        int             // messages handed out or pending, not yet settled or requeued
	requeue     bool            // one was requeued: the entry goes back whole when the last is done
	pending     []storedMessage // not handed out yet (own copies)
	redelivered bool
}

// nextPartLocked returns the next pending message of a multi-message
// entry (the lowest offset first); q.mu is held.
func (q *queue) nextPartLocked() (int64, storedMessage, bool, bool) {
	best := int64(-1)
	for o, p := range q.parts {
		if len(p.pending) > 0 && (best < 0 || o < best) {
			best = o
		}
	}
	if best < 0 {
		return 0, storedMessage{}, false, false
	}
	p := q.parts[best]
	m := p.pending[0]
	p.pending = p.pending[1:]
	return best, m, p.redelivered, true
}

// partDoneLocked counts one message of entry o settled (or requeued); it
// reports whether that is all there is to do (other messages of the
// entry are still out). When the last one is done the entry is settled,
// or requeued if any of its messages was. q.mu is held.
func (q *queue) partDoneLocked(o int64, requeue bool) bool {
	p := q.parts[o]
	if p == nil {
		return false
	}
	p.left--
	p.requeue = p.requeue || requeue
	if p.left > 0 {
		return true
	}
	delete(q.parts, o)
	if p.requeue && !requeue {
		q.requeueLocked(o, true)
		return true
	}
	return false
}

// foreignStoreTime is when the store wrote a record of another protocol
// (ms).
func foreignStoreTime(t record.Type, rec []byte) int64 {
	if t == record.RocketMQ {
		return message.View(rec).StoreTimestamp()
	}
	return record.Envelope(rec).StoreTimestamp()
}

// foreignMessages converts a record of another protocol in a queue over
// a Keel topic into the messages delivered (one per Kafka record):
// exchange "", the routing key the conversion gives (the
// AMQP_ROUTING_KEY property, else the topic), AMQP properties from the
// mapping. Bodies are copied when there are several (they outlive the
// read).
func foreignMessages(rec []byte, topic string) ([]storedMessage, error) {
	var ms []storedMessage
	err := translate.EachAMQP(rec, topic, translate.DefaultLimit, func(a *translate.AMQPMessage) error {
		ms = append(ms, storedMessage{routingKey: a.RoutingKey, props: a.Props, body: a.Body})
		return nil
	})
	if err == nil && len(ms) == 0 {
		err = fmt.Errorf("amqp: the record holds no message")
	}
	if err != nil {
		return nil, err
	}
	if len(ms) > 1 {
		for i := range ms {
			ms[i].body = append([]byte(nil), ms[i].body...)
		}
	}
	return ms, nil
}
