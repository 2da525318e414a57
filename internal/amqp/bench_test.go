package amqp

import (
	"crypto/sha256"
	"runtime"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/heapwatch"
	"github.com/keelmq/keel/internal/store"
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

// BenchmarkLargeMessage: amqp091-go publishes one 100 MiB persistent
// message with a confirm and consumes it back with a manual ack, against
// a SYNC_FLUSH store on the test's disk with amqpMaxMessageSize's largest
// useful setting for it; every delivered body is checked against the
// published one. It reports the round trip's MB/s and the largest heap
// the process reached (peak-heap-MiB: the body is held while it
// arrives, once on each side of the socket).
func BenchmarkLargeMessage(b *testing.B) {
	const size = 100 << 20
	br := &broker{t: b, dir: b.TempDir(), storeCfg: func(c *store.Config) {
		c.CommitLogSegmentBytes = 256 << 20
		c.MaxRecordBodyBytes = size
	}}
	br.start()
	b.Cleanup(br.stop)
	ch := br.channel()
	if _, err := ch.QueueDeclare("big", true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		b.Fatal(err)
	}
	msgs, err := ch.Consume("big", "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 7 / 3)
	}
	sum := sha256.Sum256(body)
	runtime.GC()
	base := heapwatch.Now()
	stop := heapwatch.Watch()
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		dc, err := ch.PublishWithDeferredConfirm("", "big", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		if !dc.Wait() {
			b.Fatal("the 100 MiB message was nacked")
		}
		select {
		case d := <-msgs:
			if sha256.Sum256(d.Body) != sum {
				b.Fatalf("delivered %d bytes that differ from the %d published", len(d.Body), size)
			}
			d.Ack(false)
		case <-time.After(time.Minute):
			b.Fatal("the 100 MiB message was not delivered")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(stop()-base)/(1<<20), "peak-heap-MiB")
}
