package amqp

// Observation hooks for metrics, as the RocketMQ door's (broker.Observer):
// the door imports no metrics library. Config.Traffic counts connections,
// methods, errors and bytes; Config.Observer is told of every publish once
// the store answered it and of every delivery. Observer methods run on the
// connection's goroutines and must be cheap and never block.

import "time"

// Observer receives the door's publish and delivery events.
type Observer interface {
	// OnSend reports a basic.publish routed to a queue: the topic of its
	// first routed queue ("" when only full reject-publish queues were
	// routed to), the messages stored (1, or 0 unless result is SUCCESS),
	// its body bytes, the result (SUCCESS, REFUSED for a full
	// reject-publish queue, else the store's status) and the time from its
	// last frame to the store's answer. A publish routed to no queue
	// stores nothing and is not reported.
	OnSend(topic string, msgs, bytes int, result string, d time.Duration)
	// OnDeliver reports messages delivered from a queue's topic
	// (basic.deliver, basic.get-ok).
	OnDeliver(topic string, msgs int)
}

// observeSend reports a publish to qs (nil: routed nowhere).
func (s *Server) observeSend(qs []*queue, bytes int, result string, start time.Time) {
	o := s.cfg.Observer
	if o == nil {
		return
	}
	topic, msgs := "", 0
	if len(qs) > 0 {
		topic = qs[0].topic
	}
	if result == "SUCCESS" {
		msgs = 1
	}
	o.OnSend(topic, msgs, bytes, result, time.Since(start))
}

// observeDeliver reports one delivery from q.
func (s *Server) observeDeliver(q *queue) {
	if o := s.cfg.Observer; o != nil {
		o.OnDeliver(q.topic, 1)
	}
}
