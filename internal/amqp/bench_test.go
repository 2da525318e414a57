package amqp

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// BenchmarkPublishConfirmed: amqp091-go publishes 1 KiB persistent
// messages to a durable queue with confirms (256 outstanding) on one
// channel, against a SYNC_FLUSH store on the test's disk.
func BenchmarkPublishConfirmed(b *testing.B) {
	br := startBrokerTB(b)
	c, err := amqp091.Dial(br.url())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ch, _ := c.Channel()
	ch.QueueDeclare("bench", true, false, false, false, nil)
	ch.Confirm(false)
	body := make([]byte, 1024)
	var pending []*amqp091.DeferredConfirmation
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		dc, err := ch.PublishWithDeferredConfirm("", "bench", false, false, amqp091.Publishing{DeliveryMode: 2, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		pending = append(pending, dc)
		if len(pending) == 256 {
			if !pending[0].Wait() {
				b.Fatal("nack")
			}
			pending = pending[1:]
		}
	}
	for _, dc := range pending {
		if !dc.Wait() {
			b.Fatal("nack")
		}
	}
}
