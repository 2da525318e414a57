package amqp

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// writeCountListener counts the writes to each connection it accepts.
type writeCountListener struct {
	net.Listener
	mu     sync.Mutex
	counts []*atomic.Int64 // per accepted connection, in accept order
}

func (l *writeCountListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := new(atomic.Int64)
	l.mu.Lock()
	l.counts = append(l.counts, n)
	l.mu.Unlock()
	return writeCountConn{c, n}, nil
}

// last is the write count of the connection accepted last.
func (l *writeCountListener) last() *atomic.Int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[len(l.counts)-1]
}

type writeCountConn struct {
	net.Conn
	n *atomic.Int64
}

func (c writeCountConn) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// rawMessage is a content method read whole from a raw connection.
type rawMessage struct {
	m    wire.Method
	body string
}

// content reads the next method with its content (header and body
// frames), skipping heartbeats.
func (c *rawConn) content() rawMessage {
	c.t.Helper()
	var msg rawMessage
	var size uint64
	for {
		f, err := c.fr.ReadFrame(1 << 20)
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		switch f.Type {
		case wire.FrameMethod:
			if msg.m != nil {
				c.t.Fatalf("%s before the content of %s", mustMethod(c.t, f.Payload).Name(), msg.m.Name())
			}
			msg.m = mustMethod(c.t, f.Payload)
			if _, ok := msg.m.(*wire.BasicGetEmpty); ok {
				return msg
			}
		case wire.FrameHeader:
			h, err := wire.ReadHeader(f.Payload)
			if err != nil {
				c.t.Fatal(err)
			}
			if size = h.BodySize; size == 0 {
				return msg
			}
		case wire.FrameBody:
			msg.body += string(f.Payload)
			if uint64(len(msg.body)) == size {
				return msg
			}
		}
	}
}

func mustMethod(t *testing.T, p []byte) wire.Method {
	t.Helper()
	m, err := wire.ReadMethod(p)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestAckBurstDeliversInOneWrite: a consumer at its prefetch limit that
// acknowledges n deliveries with one burst of n basic.acks (one read)
// gets the next n deliveries in one write, not one write per ack, in
// queue order; and a method after the acks in the same burst (here a
// basic.get) runs after those deliveries, as when each ack delivered at
// once: it gets the message after them.
func TestAckBurstDeliversInOneWrite(t *testing.T) {
	const n = 20
	wl := &writeCountListener{}
	b := &broker{t: t, dir: t.TempDir(), wrapListener: func(ln net.Listener) net.Listener { wl.Listener = ln; return wl }}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for i := range 2*n + 1 {
		bodies = append(bodies, fmt.Sprintf("m-%02d", i))
	}
	publishConfirmed(t, ch, "q", bodies...)

	rc := dialRaw(t, b)
	rc.open()
	writes := wl.last()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
	rc.method()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.BasicQos{PrefetchCount: n}))
	rc.method()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.BasicConsume{Queue: "q", ConsumerTag: "c"}))
	if m := rc.method(); m.Name() != (&wire.BasicConsumeOk{}).Name() {
		t.Fatalf("got %s, want basic.consume-ok", m.Name())
	}
	for i := range n {
		d := rc.content()
		if dm, ok := d.m.(*wire.BasicDeliver); !ok || dm.DeliveryTag != uint64(i+1) || d.body != bodies[i] {
			t.Fatalf("delivery %d: %s %+v %q", i, d.m.Name(), d.m, d.body)
		}
	}
	var burst []byte
	for tag := uint64(1); tag <= n; tag++ {
		burst = wire.AppendMethodFrame(burst, 1, &wire.BasicAck{DeliveryTag: tag})
	}
	burst = wire.AppendMethodFrame(burst, 1, &wire.BasicGet{Queue: "q", NoAck: true})
	before := writes.Load()
	rc.send(burst) // one write: one read burst
	for i := n; i < 2*n; i++ {
		d := rc.content()
		if dm, ok := d.m.(*wire.BasicDeliver); !ok || dm.DeliveryTag != uint64(i+1) || d.body != bodies[i] {
			t.Fatalf("delivery %d after the acks: %s %+v %q", i, d.m.Name(), d.m, d.body)
		}
	}
	got := rc.content()
	if _, ok := got.m.(*wire.BasicGetOk); !ok || got.body != bodies[2*n] {
		t.Fatalf("basic.get after the acks: %s %q, want get-ok %q", got.m.Name(), got.body, bodies[2*n])
	}
	// The deliveries' write, then the get-ok's.
	if w := writes.Load() - before; w > 2 {
		t.Fatalf("the %d deliveries a burst of %d acks allowed, and a get-ok, took %d writes, want 2", n, n, w)
	}
}

// TestPumpReadsAhead: a consumer with credit for many messages gets them
// from one read of the store (the pump reads the offsets after the one it
// needs with it), in queue order, each message as published, also those
// of a transaction (one record for several offsets) in the middle, and
// a requeued one with its redelivered flag; a consumer with credit for one
// reads one message.
func TestPumpReadsAhead(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range 10 {
		want = append(want, fmt.Sprintf("single-%d", i))
	}
	publishConfirmed(t, ch, "q", want[:5]...)
	tx := b.channel()
	if err := tx.Tx(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		body := fmt.Sprintf("tx-%d", i)
		want = append(want[:5+i], append([]string{body}, want[5+i:]...)...)
		if err := tx.Publish("", "q", false, false, amqp091.Publishing{Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.TxCommit(); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "q", want[8:]...)

	// Credit for one: one read per delivery.
	one := b.channel()
	if err := one.Qos(1, 0, false); err != nil {
		t.Fatal(err)
	}
	st := b.st.Stats()
	ds, err := one.Consume("q", "one", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := recv(t, ds)
	if string(d.Body) != want[0] {
		t.Fatalf("first delivery %q, want %q", d.Body, want[0])
	}
	if now := b.st.Stats(); now.Gets-st.Gets != 1 || now.GetMessages-st.GetMessages != 1 {
		t.Fatalf("one delivery read the store %d times, %d messages", now.Gets-st.Gets, now.GetMessages-st.GetMessages)
	}
	if err := one.Cancel("one", false); err != nil {
		t.Fatal(err)
	}
	if err := d.Nack(false, true); err != nil { // back to its place, served first
		t.Fatal(err)
	}
	if err := one.Qos(1, 0, false); err != nil { // answered after the nack ran
		t.Fatal(err)
	}

	many := b.channel()
	if err := many.Qos(100, 0, false); err != nil {
		t.Fatal(err)
	}
	gets := b.st.Stats().Gets
	ds, err = many.Consume("q", "many", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range want {
		d := recv(t, ds)
		if string(d.Body) != w || d.Redelivered != (i == 0) {
			t.Fatalf("delivery %d: %q redelivered %v, want %q redelivered %v", i, d.Body, d.Redelivered, w, i == 0)
		}
	}
	// The requeued first message is back at its place: it and the twelve
	// after it with one read.
	if n := b.st.Stats().Gets - gets; n != 1 {
		t.Fatalf("%d deliveries read the store %d times, want 1", len(want), n)
	}
}

// TestStoredMessageParseAllocs: reading a stored message for a delivery
// allocates only its routing key (no error value built in case it is
// truncated), and the expiration check of a message without an
// expiration property (here a persistent one, delivery-mode set) does
// not decode its properties; one with an expiration is read as such.
func TestStoredMessageParseAllocs(t *testing.T) {
	var w wire.Writer
	(&wire.BasicProperties{Flags: wire.FlagDeliveryMode, DeliveryMode: 2}).Write(&w)
	persistent := w.Buf
	body := appendMessage(nil, &storedMessage{routingKey: "bench-queue", props: persistent, body: make([]byte, 1024)})
	var m storedMessage
	if n := testing.AllocsPerRun(100, func() { m, _ = parseBody(storedMessage{}, body) }); n > 1 {
		t.Fatalf("parseBody: %v allocations, want 1 (the routing key)", n)
	}
	if m.routingKey != "bench-queue" || len(m.body) != 1024 {
		t.Fatalf("parsed %q with %d body bytes", m.routingKey, len(m.body))
	}
	if n := testing.AllocsPerRun(100, func() { messageExpiration(persistent) }); n != 0 {
		t.Fatalf("the expiration check of a message without one: %v allocations", n)
	}
	var we wire.Writer
	(&wire.BasicProperties{Flags: wire.FlagDeliveryMode | wire.FlagExpiration, DeliveryMode: 2, Expiration: "1500"}).Write(&we)
	if exp, ok := messageExpiration(we.Buf); !ok || exp != 1500 {
		t.Fatalf("expiration %d %v, want 1500", exp, ok)
	}
	if _, ok := messageExpiration(persistent); ok {
		t.Fatal("an expiration found in a message without one")
	}
}

// TestAppendContentAllocs: a delivery's content header frame is laid out
// in the connection's buffer, not built apart first (the one allocation
// left is the method encoder's writer, which escapes through its
// interface call), and the frames are those built one by one.
func TestAppendContentAllocs(t *testing.T) {
	var w wire.Writer
	(&wire.BasicProperties{Flags: wire.FlagDeliveryMode, DeliveryMode: 2}).Write(&w)
	props, body := w.Buf, make([]byte, 1024)
	m := &wire.BasicDeliver{ConsumerTag: "c", DeliveryTag: 7, RoutingKey: "q"}
	buf := make([]byte, 0, 4096)
	if n := testing.AllocsPerRun(100, func() { buf = appendContent(buf[:0], 4096, 1, m, props, body) }); n > 1 {
		t.Fatalf("appendContent: %v allocations", n)
	}
	want := wire.AppendMethodFrame(nil, 1, m)
	want = wire.AppendFrame(want, wire.FrameHeader, 1, wire.AppendHeader(nil, uint64(len(body)), props))
	want = wire.AppendFrame(want, wire.FrameBody, 1, body)
	if string(buf) != string(want) {
		t.Fatal("appendContent's frames differ from the frames built one by one")
	}
}

// isSettlement knows basic.ack, basic.nack and basic.reject by their
// class and method ids, and nothing else.
func TestIsSettlement(t *testing.T) {
	for _, tc := range []struct {
		m    wire.Method
		want bool
	}{
		{&wire.BasicAck{}, true}, {&wire.BasicNack{}, true}, {&wire.BasicReject{}, true},
		{&wire.BasicPublish{}, false}, {&wire.BasicGet{}, false}, {&wire.BasicQos{}, false},
	} {
		p := wire.AppendMethod(nil, tc.m)
		if got := isSettlement(p); got != tc.want {
			t.Errorf("isSettlement(%T) = %v, want %v", tc.m, got, tc.want)
		}
	}
	if isSettlement([]byte{0, 60, 0}) {
		t.Error("a 3-byte payload taken for a settlement")
	}
}

// TestSendDeliverHeldAllocates: a delivery laid out in the held
// deliveries allocates nothing once the buffer has room: neither its
// basic.deliver nor the writer escape through the Method interface.
func TestSendDeliverHeldAllocates(t *testing.T) {
	c := &conn{frameMax: wire.FrameMinSize * 32}
	props, body := []byte{0x10, 0, 2}, make([]byte, 1024)
	tag, rk := "amq.ctag-x", "bench"
	n := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		n++
		c.held = c.held[:0]
		if err := c.sendDeliverHeld(1, &wire.BasicDeliver{ConsumerTag: tag, DeliveryTag: n, RoutingKey: rk}, props, body); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per delivery held", allocs)
	}
	want := appendContent(nil, c.frameMax, 1, &wire.BasicDeliver{ConsumerTag: tag, DeliveryTag: n, RoutingKey: rk}, props, body)
	if !bytes.Equal(c.held, want) {
		t.Fatalf("held frames differ from appendContent's")
	}
}
