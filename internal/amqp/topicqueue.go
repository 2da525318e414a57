package amqp

// Queues over a Keel topic (docs/cross-protocol.md): a queue declared
// with the argument x-keel-topic (a string) is stored in queue 0 of that
// topic instead of a topic of its own, so that RocketMQ and Kafka
// producers feed it and RocketMQ and Kafka consumers read what AMQP
// publishers route to it. Its acknowledgement state is its own, over
// that ConsumeQueue's offsets, as for any queue; a RocketMQ or Kafka
// consumer group keeps its own offsets. Records of other protocols are
// converted on delivery (package translate). Deleting the queue keeps
// the topic. One AMQP queue per topic.

import (
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"

	"github.com/keelmq/keel/internal/amqp/wire"
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
			return "", soft(wire.PreconditionFailed, m, "topic '%s' already feeds queue '%s' in vhost '/' (one queue per topic)", t, q.name)
		}
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
	s.vhost.mu.Lock()
	for _, q := range s.vhost.queues {
		s.trackTopic(q, false)
	}
	s.vhost.mu.Unlock()
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
	if fresh {
		q.mu.Lock()
		end := s.store.MaxOffset(q.topic, queueID)
		q.floor, q.cursor, q.delivered, q.restoredD, q.dirty = end, end, end, end, true
		q.mu.Unlock()
	}
	s.topics.queues.Store(q.topic, &topicQueue{q: q})
}

// untrackTopic forgets a deleted queue over a Keel topic.
func (s *Server) untrackTopic(q *queue) {
	if v, ok := s.topics.queues.Load(q.topic); ok && v.(*topicQueue).q == q {
		s.topics.queues.CompareAndDelete(q.topic, v)
	}
}

// parseRecord decodes the record at a queue's offset: an AMQP record, or
// in a queue over a Keel topic a record of another protocol, converted.
func (q *queue) parseRecord(rec []byte) (storedMessage, error) {
	if t, err := record.TypeOf(rec); err == nil && t != record.AMQP && !q.ownsTopic() {
		return foreignMessage(rec, q.topic)
	}
	return parseMessage(rec)
}

// foreignMessage converts a record of another protocol in a queue over a
// Keel topic into the message delivered: exchange "", the routing key
// the conversion gives (the AMQP_ROUTING_KEY property, else the topic),
// AMQP properties from the mapping. A Kafka batch of several records is
// one ConsumeQueue entry, and an entry is what a queue's acknowledgement
// state counts: it is refused (the error names it) rather than delivered
// in part.
func foreignMessage(rec []byte, topic string) (storedMessage, error) {
	var m storedMessage
	if t, err := record.TypeOf(rec); err == nil && t == record.KafkaBatch {
		if err := record.CheckEnvelope(rec); err != nil {
			return m, err
		}
		if n := record.Envelope(rec).Messages(); n != 1 {
			return m, fmt.Errorf("amqp: a Kafka batch of %d records is one entry: only one-record batches are delivered to AMQP queues", n)
		}
	}
	n := 0
	err := translate.EachAMQP(rec, topic, translate.DefaultLimit, func(a *translate.AMQPMessage) error {
		n++
		m = storedMessage{routingKey: a.RoutingKey, props: a.Props, body: a.Body}
		return nil
	})
	if err == nil && n != 1 {
		err = fmt.Errorf("amqp: the record converts to %d messages", n)
	}
	return m, err
}
