package amqp

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/vfs"
)

// TestLeaseRaisedOffTheQueueLock: a durable queue's delivery lease is
// raised before the deliveries reach it, and while that durable write is
// stuck in its fsync the queue goes on: it delivers up to the current
// lease, and a publish to it is confirmed (which takes the queue's lock).
func TestLeaseRaisedOffTheQueueLock(t *testing.T) {
	var leaseSyncs atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	hooked := syncHookFS{FS: vfs.OS{}, hook: func(name string) {
		if strings.Contains(name, "lease-") && leaseSyncs.Add(1) == 2 {
			close(entered)
			<-release // the second lease write hangs in its fsync
		}
	}}
	b := &broker{t: t, dir: t.TempDir(), fs: hooked}
	b.start()
	defer b.stop()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	pub := b.channel()
	if _, err := pub.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	bodies := make([]string, 300)
	for i := range bodies {
		bodies[i] = "m"
	}
	publishConfirmed(t, pub, "q", bodies...)

	sub := b.channel()
	const prefetch = 200 // within the first lease (leaseStep past the first delivery)
	if err := sub.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := sub.Consume("q", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatalf("no second lease write while %d deliveries of the first lease went out (%d lease fsyncs)", prefetch, leaseSyncs.Load())
	}
	for n := range prefetch {
		select {
		case <-ds:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d deliveries while the lease write hangs", n, prefetch)
		}
	}
	dc, err := pub.PublishWithDeferredConfirm("", "q", false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte("during")})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-dc.Done():
		if !dc.Acked() {
			t.Fatal("the publish during the lease write was nacked")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a publish to the queue is not confirmed while its lease is written")
	}
	close(release)
	released = true
	waitUntil(t, "the raised lease", func() bool {
		l, err := readLease(vfs.OS{}, b.srv.vhosts["/"].queue("q").leasePath())
		return err == nil && l >= 1+2*leaseStep
	})
}
