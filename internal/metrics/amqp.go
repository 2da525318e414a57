package metrics

// AMQP queues (internal/amqp), read at scrape time from Sources.AMQP. The
// metrics package does not import the AMQP front door: the wiring copies
// its snapshot into AMQPQueueStats.

import "github.com/prometheus/client_golang/prometheus"

// AMQPQueueStats is one AMQP queue at scrape time; counters since the
// broker started.
type AMQPQueueStats struct {
	Vhost     string
	Queue     string
	Ready     int64
	Unacked   int64
	Consumers int
	// OldestUnsettledAge is the age in seconds of the oldest message not
	// yet settled; negative: none.
	OldestUnsettledAge float64

	Published, Delivered, Redelivered, Acked, DeadLettered, Dropped, Refused uint64
}

var (
	dAMQPReady        = desc("keel_amqp_queue_messages_ready", "AMQP messages waiting to be delivered, per queue.", "vhost", "queue")
	dAMQPUnacked      = desc("keel_amqp_queue_messages_unacked", "AMQP messages delivered and not yet settled, per queue.", "vhost", "queue")
	dAMQPConsumers    = desc("keel_amqp_queue_consumers", "AMQP consumers (basic.consume), per queue.", "vhost", "queue")
	dAMQPOldest       = desc("keel_amqp_queue_oldest_unsettled_age_seconds", "Age of the oldest unsettled message of an AMQP queue (0 when all are settled); it holds the CommitLog against retention.", "vhost", "queue")
	dAMQPPublished    = desc("keel_amqp_queue_published_total", "Messages stored into an AMQP queue (dead-letter copies included).", "vhost", "queue")
	dAMQPDelivered    = desc("keel_amqp_queue_delivered_total", "Deliveries (basic.deliver, basic.get-ok) from an AMQP queue.", "vhost", "queue")
	dAMQPRedelivered  = desc("keel_amqp_queue_redelivered_total", "Deliveries with redelivered=true from an AMQP queue.", "vhost", "queue")
	dAMQPAcked        = desc("keel_amqp_queue_acked_total", "Messages of an AMQP queue settled by basic.ack (or delivered with no-ack).", "vhost", "queue")
	dAMQPDeadLettered = desc("keel_amqp_queue_dead_lettered_total", "Messages of an AMQP queue moved to its dead-letter exchange.", "vhost", "queue")
	dAMQPDropped      = desc("keel_amqp_queue_dropped_total", "Messages of an AMQP queue expired, rejected, over x-max-length or x-delivery-limit without a dead-letter copy.", "vhost", "queue")
	dAMQPRefused      = desc("keel_amqp_queue_refused_publishes_total", "Publishes an AMQP queue refused (x-overflow=reject-publish; the publisher got basic.nack).", "vhost", "queue")

	amqpDescs = []*prometheus.Desc{dAMQPReady, dAMQPUnacked, dAMQPConsumers, dAMQPOldest, dAMQPPublished, dAMQPDelivered,
		dAMQPRedelivered, dAMQPAcked, dAMQPDeadLettered, dAMQPDropped, dAMQPRefused}
)

func (c *collector) collectAMQP(ch chan<- prometheus.Metric) {
	if c.m.cfg.AMQP == nil {
		return
	}
	for _, q := range c.m.cfg.AMQP() {
		gauge(ch, dAMQPReady, float64(q.Ready), q.Vhost, q.Queue)
		gauge(ch, dAMQPUnacked, float64(q.Unacked), q.Vhost, q.Queue)
		gauge(ch, dAMQPConsumers, float64(q.Consumers), q.Vhost, q.Queue)
		gauge(ch, dAMQPOldest, max(q.OldestUnsettledAge, 0), q.Vhost, q.Queue)
		counter(ch, dAMQPPublished, float64(q.Published), q.Vhost, q.Queue)
		counter(ch, dAMQPDelivered, float64(q.Delivered), q.Vhost, q.Queue)
		counter(ch, dAMQPRedelivered, float64(q.Redelivered), q.Vhost, q.Queue)
		counter(ch, dAMQPAcked, float64(q.Acked), q.Vhost, q.Queue)
		counter(ch, dAMQPDeadLettered, float64(q.DeadLettered), q.Vhost, q.Queue)
		counter(ch, dAMQPDropped, float64(q.Dropped), q.Vhost, q.Queue)
		counter(ch, dAMQPRefused, float64(q.Refused), q.Vhost, q.Queue)
	}
}
