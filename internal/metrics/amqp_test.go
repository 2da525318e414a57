package metrics

import "testing"

var testAMQPQueue = AMQPQueueStats{Vhost: "/", Queue: "orders", Ready: 7, Unacked: 2, Consumers: 1, OldestUnsettledAge: 12.5,
	Published: 30, Delivered: 21, Redelivered: 3, Acked: 19, DeadLettered: 4, Dropped: 1, Refused: 6}

// Every AMQP queue's snapshot is exported under its name.
func TestAMQPQueueMetrics(t *testing.T) {
	e := startEnv(t)
	got := e.scrape()
	for series, want := range map[string]float64{
		`keel_amqp_queue_messages_ready{queue="orders",vhost="/"}`:               7,
		`keel_amqp_queue_messages_unacked{queue="orders",vhost="/"}`:             2,
		`keel_amqp_queue_consumers{queue="orders",vhost="/"}`:                    1,
		`keel_amqp_queue_oldest_unsettled_age_seconds{queue="orders",vhost="/"}`: 12.5,
		`keel_amqp_queue_published_total{queue="orders",vhost="/"}`:              30,
		`keel_amqp_queue_delivered_total{queue="orders",vhost="/"}`:              21,
		`keel_amqp_queue_redelivered_total{queue="orders",vhost="/"}`:            3,
		`keel_amqp_queue_acked_total{queue="orders",vhost="/"}`:                  19,
		`keel_amqp_queue_dead_lettered_total{queue="orders",vhost="/"}`:          4,
		`keel_amqp_queue_dropped_total{queue="orders",vhost="/"}`:                1,
		`keel_amqp_queue_refused_publishes_total{queue="orders",vhost="/"}`:      6,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
}
