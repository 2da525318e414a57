package amqp

// Retention. The store deletes CommitLog segments by age
// (fileReservedTime) and under disk pressure; an AMQP message must stay
// until it is settled. Every queue therefore holds its settled floor
// (store.SetQueueHolds, installed by New): age-based retention keeps the
// segment the queue's first unsettled message is in and every later one,
// and disk pressure counts the floor as a consumer group's offset (so a
// queue whose messages are all settled lets its segments go).
//
// A queue nobody consumes from would thus pin the whole CommitLog. Keel's
// answer is an alarm, not a silent loss nor a copy: the store logs at WARN
// which queue keeps an expired segment, the queue's oldest unsettled
// message's age is exported (keel_amqp_queue_oldest_unsettled_age_seconds)
// and shown by `keel amqp queues`, and once the disk fills the
// disk-pressure policy decides as for a RocketMQ consumer group that has
// not consumed: by default nothing unsettled is deleted and writes are
// refused at the hard limit (AMQP publishers see connection.blocked),
// while diskPressureDelete=unconsumed deletes and logs each lost range at
// ERROR. x-message-ttl, x-max-length and x-delivery-limit are the
// per-queue bounds an application sets to keep a queue from pinning.

import "github.com/keelmq/keel/internal/store"

// holds is the store's QueueHoldsFunc: every queue's settled floor; for a
// durable queue the floor acks.json holds (a restart may serve again what
// was settled after it, so that must still be there).
func (s *Server) holds() store.QueueHolds {
	out := store.QueueHolds{}
	for _, v := range s.vhosts {
		v.mu.Lock()
		for _, q := range v.queues {
			if q.isStream() {
				continue // a stream's retention is its own (stream.go)
			}
			out[q.topic] = map[int32]int64{queueID: q.holdFloor()}
		}
		v.mu.Unlock()
	}
	return out
}

func (q *queue) holdFloor() int64 {
	if q.persistent() {
		return q.savedFloor.Load()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.floor
}
