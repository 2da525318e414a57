package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// When the store's disk is above its hard limit, clients that take
// connection.blocked get it, publishes are nacked, and connection.unblocked
// follows once space returns.
func TestConnectionBlockedOnFullDisk(t *testing.T) {
	mem := vfs.NewMem()
	b := startBrokerWith(t, func(c *store.Config) {
		c.FS = mem
		c.RetentionCheckInterval = 10 * time.Millisecond
		c.DiskReserveBytes = 0
	})
	conn := b.dial()
	blocked := conn.NotifyBlocked(make(chan amqp091.Blocking, 4))
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "q", "before")
	total, free, _ := mem.DiskUsage(b.dir)
	mem.SetCapacity((total - free) * 100 / 95) // 95 % used: above the hard limit (90 %)
	next := func(want bool) amqp091.Blocking {
		t.Helper()
		select {
		case bl := <-blocked:
			if bl.Active != want {
				t.Fatalf("got %+v, want active=%v", bl, want)
			}
			return bl
		case <-time.After(10 * time.Second):
			t.Fatalf("no connection.blocked active=%v in 10 s", want)
		}
		return amqp091.Blocking{}
	}
	if bl := next(true); bl.Reason == "" {
		t.Fatal("connection.blocked without a reason")
	}
	dc, err := ch.PublishWithDeferredConfirm("", "q", false, false, amqp091.Publishing{Body: []byte("while full")})
	if err != nil {
		t.Fatal(err)
	}
	if dc.Wait() {
		t.Fatal("a publish on a full disk was confirmed")
	}
	mem.SetCapacity(vfs.DefaultMemCapacity)
	next(false)
	publishConfirmed(t, ch, "q", "after")
}
