package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// When the store's disk is above its hard limit, clients that take
// connection.blocked get it, publishes are nacked, and connection.unblocked
// follows once space returns. Clients that did not announce the capability
// (none, or connection.blocked=false) are sent neither method, whether
// they were open when the disk filled or opened while it was full.
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
	// Open before the disk fills: one client without capabilities, one
	// that says it does not take connection.blocked.
	plain := dialRaw(t, b)
	plain.openProps(nil)
	refuses := dialRaw(t, b)
	refuses.openProps(wire.Table{"capabilities": wire.Table{"connection.blocked": false}})
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
	// Opened while the disk is full: a client with the capability is
	// told at once, one without it is not.
	late := dialRaw(t, b)
	late.openProps(wire.Table{"capabilities": wire.Table{"connection.blocked": true}})
	if m := late.method(); m.Name() != (&wire.ConnectionBlocked{}).Name() {
		t.Fatalf("a client opened on a full disk got %s first, want connection.blocked", m.Name())
	}
	lateRaw := dialRaw(t, b)
	lateRaw.openProps(nil)
	mem.SetCapacity(vfs.DefaultMemCapacity)
	next(false)
	publishConfirmed(t, ch, "q", "after")
	// Every connection.blocked the server sent was written before the
	// unblocked above (the sweep that saw the full disk ended first), and
	// the server answers on a connection in order: the first method after
	// channel.open must be its open-ok.
	for name, c := range map[string]*rawConn{"no capabilities": plain, "connection.blocked=false": refuses, "opened while full": lateRaw} {
		c.nc.SetDeadline(time.Now().Add(10 * time.Second))
		c.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
		if m := c.method(); m.Name() != (&wire.ChannelOpenOk{}).Name() {
			t.Fatalf("client with %s: got %s before channel.open-ok", name, m.Name())
		}
	}
}

// openProps negotiates as guest, announcing props as its client
// properties.
func (c *rawConn) openProps(props wire.Table) {
	c.t.Helper()
	c.send(wire.ProtocolHeader)
	c.method() // start
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionStartOk{ClientProperties: props, Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US"}))
	c.method() // tune
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionTuneOk{ChannelMax: 10, FrameMax: 4096}))
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionOpen{VirtualHost: "/"}))
	if _, ok := c.method().(*wire.ConnectionOpenOk); !ok {
		c.t.Fatal("no open-ok")
	}
}
