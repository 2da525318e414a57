package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// A delivery not acknowledged within the consumer timeout closes its
// channel with 406; the message is delivered again, redelivered=true.
func TestConsumerTimeout(t *testing.T) {
	b := &broker{t: t, dir: t.TempDir(), consumerTimeout: 300 * time.Millisecond}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if _, err := ch.QueueDeclare("slow", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "slow", "held too long")
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	ds, err := ch.Consume("slow", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, ds) // and never acked
	start := time.Now()
	select {
	case e := <-closed:
		if e == nil || e.Code != 406 {
			t.Fatalf("channel closed with %v, want 406", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the channel outlived the consumer timeout")
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("closed %v after the delivery, before the timeout", d)
	}
	d, ok, err := b.channel().Get("slow", true)
	if err != nil || !ok || string(d.Body) != "held too long" || !d.Redelivered {
		t.Fatalf("after the timeout: %v %v %q redelivered=%v", ok, err, d.Body, d.Redelivered)
	}
}
