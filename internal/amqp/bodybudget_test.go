package amqp

import (
	"testing"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/netlimit"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// rawPublishStart opens channel id on c and sends basic.publish to queue
// q with a content header announcing size bytes and the first part bytes
// of the body, leaving the rest unsent.
func rawPublishStart(c *rawConn, id uint16, q string, size, part int) {
	c.t.Helper()
	c.send(wire.AppendMethodFrame(nil, id, &wire.ChannelOpen{}))
	if _, ok := c.method().(*wire.ChannelOpenOk); !ok {
		c.t.Fatal("no channel.open-ok")
	}
	b := wire.AppendMethodFrame(nil, id, &wire.BasicPublish{RoutingKey: q})
	b = wire.AppendFrame(b, wire.FrameHeader, id, wire.AppendHeader(nil, uint64(size), []byte{0, 0}))
	if part > 0 {
		b = wire.AppendFrame(b, wire.FrameBody, id, make([]byte, part))
	}
	c.send(b)
}

func doorStats(b *netlimit.Budget, door string) netlimit.DoorStats {
	for _, s := range b.Stats() {
		if s.Door == door {
			return s
		}
	}
	return netlimit.DoorStats{}
}

// TestBodiesBeingReceivedHoldTheBudget: a body counts against the
// broker's request budget from its content header until it is stored,
// however slowly its frames come; another connection's body waits for
// the bytes (its reader stops); a second body on a connection whose first
// is still arriving is refused with 506 when it does not fit; everything
// is given back.
func TestBodiesBeingReceivedHoldTheBudget(t *testing.T) {
	budget := netlimit.NewBudget(1 << 20)
	b := &broker{t: t, dir: t.TempDir(), frameBudget: budget.Door("amqp")}
	b.start()
	t.Cleanup(b.stop)
	if _, err := b.channel().QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}

	// Two bodies of 500 KiB on two connections, of which 4000 bytes came
	// each: 1000 KiB of the 1 MiB budget are held.
	a := dialRaw(t, b)
	a.open()
	rawPublishStart(a, 1, "q", 500<<10, 4000)
	e := dialRaw(t, b)
	e.open()
	rawPublishStart(e, 1, "q", 500<<10, 4000)
	waitUntil(t, "the two bodies' reservations", func() bool { return budget.HeldBytes() >= 1000<<10 })

	// A third connection's 100 KiB message waits for the bytes.
	pub := b.channel()
	if err := pub.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := pub.NotifyPublish(make(chan amqp091.Confirmation, 1))
	if err := pub.Publish("", "q", false, false, amqp091.Publishing{DeliveryMode: 2, Body: make([]byte, 100<<10)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the third body waiting for budget", func() bool { return doorStats(budget, "amqp").Waiting == 1 })
	select {
	case c := <-confirms:
		t.Fatalf("confirmed (%v) while its body's bytes were not in the budget", c.Ack)
	default:
	}

	// A second body on the first connection does not fit: 506.
	rawPublishStart(a, 2, "q", 100<<10, 0)
	a.expectClose(wire.ResourceError)

	// The first connection's reservation went with it: the waiting
	// message is stored and confirmed.
	c := <-confirms
	if !c.Ack {
		t.Fatal("nacked")
	}
	// The other body completes: its bytes are given back.
	var rest []byte
	for left := 500<<10 - 4000; left > 0; left -= 4000 { // frame-max 4096
		rest = wire.AppendFrame(rest, wire.FrameBody, 1, make([]byte, min(left, 4000)))
	}
	e.send(rest)
	waitUntil(t, "the budget given back", func() bool { return budget.HeldBytes() == 0 })

	check := b.channel()
	waitUntil(t, "the confirmed message and the completed one in q", func() bool {
		n, err := check.QueueDeclarePassive("q", true, false, false, false, nil)
		return err == nil && n.Messages == 2
	})
}
