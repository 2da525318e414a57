package amqp

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"

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
