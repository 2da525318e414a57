package amqp

// The consumer timeout (RabbitMQ's consumer_timeout). A delivery that
// waits longer than Config.ConsumerTimeout (30 minutes by default) for
// its acknowledgement closes its channel with 406 PRECONDITION_FAILED;
// the channel's unacknowledged deliveries go back to their queues, as on
// any channel close. It bounds how long a stuck consumer holds messages
// (and so the CommitLog: retention.go). Channels are looked at every
// consumerTimeoutTicks sweeps (about once a second).

import (
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// consumerTimeoutTicks is how many expiry sweeps pass between two looks
// at the channels' oldest deliveries.
const consumerTimeoutTicks = int(time.Second / expirySweepInterval)

// checkConsumerTimeouts closes every channel with a delivery older than
// the consumer timeout.
func (s *Server) checkConsumerTimeouts(now int64) {
	limit := s.cfg.ConsumerTimeout.Milliseconds()
	if limit <= 0 {
		return
	}
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.chMu.Lock()
		chs := make([]*channel, 0, len(c.channels))
		for _, ch := range c.channels {
			chs = append(chs, ch)
		}
		c.chMu.Unlock()
		for _, ch := range chs {
			if ch.oldestDelivery(now) > limit {
				// Logged as the channel exception it is (errors.go).
				ch.timeOut(soft(wire.PreconditionFailed, nil,
					"delivery acknowledgement on channel %d timed out. Timeout value used: %d ms", ch.id, limit))
			}
		}
	}
}

// oldestDelivery returns how long (ms) the channel's oldest unacknowledged
// delivery has waited, 0 if none.
func (ch *channel) oldestDelivery(now int64) int64 {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closing {
		return 0
	}
	oldest := int64(0)
	ch.unacked.each(func(_ uint64, d delivery) { oldest = max(oldest, now-d.at) })
	return oldest
}
