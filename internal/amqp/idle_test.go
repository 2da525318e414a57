package amqp

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// With no connection and no queue the expiry sweep parks (no 50 ms
// ticks while idle); a connection wakes it, a queue keeps it sweeping
// without any connection (a TTL still dead-letters), and it parks again
// once both are gone.
func TestSweepParksWhileIdleAndWakes(t *testing.T) {
	b := startBroker(t)
	waitUntil(t, "the idle sweep to park", b.srv.sweepParked.Load)
	conn := b.dial()
	waitUntil(t, "a connection to wake the sweep", func() bool { return !b.srv.sweepParked.Load() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	declareDLX(t, ch)
	if _, err := ch.QueueDeclare("ttl", true, false, false, false, amqp091.Table{
		"x-message-ttl": int32(50), "x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "ttl", "expires")
	conn.Close()
	// No connection now, and nobody consumes "ttl": only the sweep moves it.
	v := b.srv.vhosts[defaultVhost]
	waitUntil(t, "the message to be dead-lettered with no connection", func() bool {
		q := v.queue("dead")
		if q == nil {
			return false
		}
		ready, _ := q.counts()
		return ready == 1
	})
	if b.srv.sweepParked.Load() {
		t.Fatal("the sweep parked with queues to look at")
	}
	conn = b.dial()
	if ch, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"ttl", "dead"} {
		if _, err := ch.QueueDelete(q, false, false, false); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close()
	waitUntil(t, "the sweep to park again", b.srv.sweepParked.Load)
}

// With no acknowledgement state to write the persist loop parks; an ack
// wakes it, the new state is written within the interval as before, and it
// parks again.
func TestAckPersistParksAndWakes(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "q", "one")
	waitUntil(t, "the ack-state loop to park", b.srv.acksParked.Load)
	q := b.srv.vhosts[defaultVhost].queue("q")
	if f := q.savedFloor.Load(); f != 0 {
		t.Fatalf("saved floor %d before any ack", f)
	}
	d := getWithin(t, ch, "q")
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the ack to be written", func() bool { return q.savedFloor.Load() == 1 })
	waitUntil(t, "the ack-state loop to park again", b.srv.acksParked.Load)
}
