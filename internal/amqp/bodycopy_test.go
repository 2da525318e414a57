package amqp

import (
	"bytes"
	"runtime"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/store"
)

// TestPublishOneFrameBodyNotCopied: a body that arrives in one frame is
// laid out in the batch from the frame itself: publishing 64 KiB messages
// allocates far less than 64 KiB each in the broker and the client
// together (a copy of the body first would be a 64 KiB allocation per
// message), alone and as a member of a cluster (keel serve's door, which
// forwards to other groups' queues). The messages are delivered intact.
// (Under the race detector, whose sync.Pool drops buffers at random, only
// the bodies are checked.)
func TestPublishOneFrameBodyNotCopied(t *testing.T) {
	// The store keeps no read window: its chunks, allocated as the first
	// writes reach them, are not the publish path's allocations.
	noWindow := func(c *store.Config) { c.ReadWindowBytes = -1 }
	t.Run("alone", func(t *testing.T) { testPublishOneFrameBodyNotCopied(t, startBrokerWith(t, noWindow)) })
	t.Run("cluster", func(t *testing.T) {
		b := &broker{t: t, dir: t.TempDir(), cluster: &staticCluster{}, group: "a", storeCfg: noWindow}
		b.start()
		t.Cleanup(b.stop)
		testPublishOneFrameBodyNotCopied(t, b)
	})
}

func testPublishOneFrameBodyNotCopied(t *testing.T, b *broker) {
	ch := b.channel()
	if _, err := ch.QueueDeclare("big", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const size, n = 64 << 10, 200
	body := make([]byte, size)
	publish := func(k int) {
		var dcs []*amqp091.DeferredConfirmation
		for i := range k {
			body[0], body[size-1] = byte(i), byte(i>>8)
			dc, err := ch.PublishWithDeferredConfirm("", "big", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: body})
			if err != nil {
				t.Fatal(err)
			}
			dcs = append(dcs, dc)
		}
		for _, dc := range dcs {
			if !dc.Wait() {
				t.Fatal("nacked")
			}
		}
	}
	publish(50) // buffers grown to their size
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	publish(n)
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per >= size/2 && !raceEnabled {
		t.Fatalf("%d bytes allocated per %d-byte message published", per, size)
	} else {
		t.Logf("%d bytes allocated per %d-byte message published", per, size)
	}
	msgs, err := ch.Consume("big", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, size)
	for i := range 50 + n {
		d := recv(t, msgs)
		k := i
		if i >= 50 {
			k = i - 50
		}
		want[0], want[size-1] = byte(k), byte(k>>8)
		if !bytes.Equal(d.Body, want) {
			t.Fatalf("message %d: body differs", i)
		}
	}
}
