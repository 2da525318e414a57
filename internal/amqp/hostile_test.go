package amqp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// rawConn is a hand-driven client: it negotiates as guest and then sends
// whatever bytes a test wants.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	fr *wire.FrameReader
}

func dialRaw(t *testing.T, b *broker) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	return &rawConn{t: t, nc: nc, fr: wire.NewFrameReader(nc)}
}

func (c *rawConn) send(b []byte) {
	c.t.Helper()
	if _, err := c.nc.Write(b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *rawConn) method() wire.Method {
	c.t.Helper()
	for {
		f, err := c.fr.ReadFrame(1 << 20)
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		if f.Type == wire.FrameHeartbeat {
			continue
		}
		m, err := wire.ReadMethod(f.Payload)
		if err != nil {
			c.t.Fatal(err)
		}
		return m
	}
}

func (c *rawConn) open() {
	c.t.Helper()
	c.send(wire.ProtocolHeader)
	c.method() // start
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US"}))
	c.method() // tune
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionTuneOk{ChannelMax: 10, FrameMax: 4096}))
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionOpen{VirtualHost: "/"}))
	if _, ok := c.method().(*wire.ConnectionOpenOk); !ok {
		c.t.Fatal("no open-ok")
	}
}

// expectClose reads until connection.close and checks its code; the
// server must then close the socket after close-ok.
func (c *rawConn) expectClose(code uint16) {
	c.t.Helper()
	m := c.method()
	cl, ok := m.(*wire.ConnectionClose)
	if !ok || cl.ReplyCode != code {
		c.t.Fatalf("got %s %+v, want connection.close %d", m.Name(), m, code)
	}
	c.nc.Write(wire.AppendMethodFrame(nil, 0, &wire.ConnectionCloseOk{}))
	// The server closes the socket (a reset when it left a bad frame's
	// bytes unread); only a timeout would mean it did not.
	var ne net.Error
	if _, err := io.ReadAll(c.nc); errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("after close-ok the socket stayed open: %v", err)
	}
}

func TestHostileFramesCloseTheConnectionWithTheirCode(t *testing.T) {
	b := startBroker(t)
	publish := wire.AppendMethodFrame(nil, 1, &wire.BasicPublish{RoutingKey: "q"})
	for _, tc := range []struct {
		name  string
		bytes []byte
		code  uint16
	}{
		{"bad end byte", append(wire.AppendFrame(nil, wire.FrameMethod, 0, []byte{0, 10, 0, 50})[:11], 0), wire.FrameError},
		{"unknown frame type", wire.AppendFrame(nil, 7, 0, nil), wire.FrameError},
		{"frame above frame-max", wire.AppendFrame(nil, wire.FrameBody, 1, make([]byte, 5000)), wire.FrameError},
		{"unknown method", wire.AppendFrame(nil, wire.FrameMethod, 1, []byte{0, 99, 0, 1}), wire.SyntaxError},
		{"truncated method", wire.AppendFrame(nil, wire.FrameMethod, 1, []byte{0, 50, 0, 10, 0, 0, 200}), wire.SyntaxError},
		{"method on a closed channel", wire.AppendMethodFrame(nil, 3, &wire.BasicQos{}), wire.ChannelError},
		{"body without publish", wire.AppendFrame(nil, wire.FrameBody, 1, []byte("x")), wire.UnexpectedFrame},
		{"method inside a publish", append(append([]byte{}, publish...), wire.AppendMethodFrame(nil, 1, &wire.BasicQos{})...), wire.UnexpectedFrame},
		{"body longer than announced", append(append(append([]byte{}, publish...),
			wire.AppendFrame(nil, wire.FrameHeader, 1, wire.AppendHeader(nil, 1, []byte{0, 0}))...),
			wire.AppendFrame(nil, wire.FrameBody, 1, []byte("xy"))...), wire.FrameError},
		{"heartbeat on a channel", wire.AppendFrame(nil, wire.FrameHeartbeat, 1, nil), wire.FrameError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, b)
			c.open()
			c.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
			c.method() // open-ok
			c.send(tc.bytes)
			c.expectClose(tc.code)
		})
	}
	// The broker still serves.
	ch := b.channel()
	if _, err := ch.QueueDeclare("still", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
}

func TestHandshakeRefusals(t *testing.T) {
	b := startBroker(t)
	c := dialRaw(t, b)
	c.send([]byte{'A', 'M', 'Q', 'P', 0, 1, 0, 0})
	got, _ := io.ReadAll(c.nc)
	if !bytes.Equal(got, wire.ProtocolHeader) {
		t.Fatalf("wrong version answered % x", got)
	}
	c = dialRaw(t, b)
	c.send(wire.ProtocolHeader)
	c.method()
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00wrong"), Locale: "en_US"}))
	c.expectClose(wire.AccessRefused)
	c = dialRaw(t, b)
	c.send(wire.ProtocolHeader)
	c.method()
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US"}))
	c.method()
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionTuneOk{ChannelMax: 10, FrameMax: 4096}))
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionOpen{VirtualHost: "other"}))
	c.expectClose(wire.NotAllowed)
}

func TestGuestOnlyFromLoopback(t *testing.T) {
	s := &Server{cfg: Config{Users: map[string]string{"app": "secret"}}}
	remote := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}
	local := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}
	ok := func(user, pass string, from net.Addr) bool { _, ok := s.authenticate(user, pass, from); return ok }
	if ok("guest", "guest", remote) || !ok("guest", "guest", local) ||
		!ok("app", "secret", remote) || ok("app", "nope", local) {
		t.Fatal("guest must work from loopback only; configured accounts from anywhere")
	}
}

func TestAMQPLAINCredentials(t *testing.T) {
	var w wire.Writer
	w.Table(wire.Table{"LOGIN": []byte("u"), "PASSWORD": []byte("p")})
	u, p, err := credentials("AMQPLAIN", w.Buf[4:]) // the response is the table without its length
	if err != nil || u != "u" || p != "p" {
		t.Fatalf("%q %q %v", u, p, err)
	}
}

// TestHeartbeats: with a 1 s heartbeat the server sends heartbeats, and
// closes a connection that has been silent for three intervals.
func TestHeartbeats(t *testing.T) {
	b := startBroker(t)
	c := dialRaw(t, b)
	c.send(wire.ProtocolHeader)
	c.method()
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US"}))
	c.method()
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionTuneOk{ChannelMax: 10, FrameMax: 4096, Heartbeat: 1}))
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionOpen{VirtualHost: "/"}))
	c.method() // open-ok
	start := time.Now()
	beats := 0
	for {
		f, err := c.fr.ReadFrame(1 << 20)
		if err != nil {
			break // closed by the server
		}
		if f.Type == wire.FrameHeartbeat {
			beats++
		}
	}
	took := time.Since(start)
	if beats < 2 || took < 2500*time.Millisecond || took > 6*time.Second {
		t.Fatalf("%d heartbeats, closed after %v; want heartbeats and a close after about 3 s of silence", beats, took)
	}
}

func TestDeletedQueueCancelsItsConsumers(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	ch.QueueDeclare("doomed", false, false, false, false, nil)
	cancels := ch.NotifyCancel(make(chan string, 1))
	if _, err := ch.Consume("doomed", "watcher", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	other := b.channel()
	if _, err := other.QueueDelete("doomed", false, false, false); err != nil {
		t.Fatal(err)
	}
	select {
	case tag := <-cancels:
		if tag != "watcher" {
			t.Fatalf("cancelled %q", tag)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no basic.cancel after the queue was deleted")
	}
}

// The connection-level codes a client sees for what Keel does not do or
// does not know: 540 NOT_IMPLEMENTED (tx, prefetch-size, immediate,
// channel.flow active=false), 503 COMMAND_INVALID (an unknown exchange
// type). Each closes only its own connection.
func TestNotImplementedAndInvalidCommands(t *testing.T) {
	b := startBroker(t)
	for _, tc := range []struct {
		name string
		code int
		do   func(ch *amqp091.Channel) error
	}{
		{"prefetch-size", 540, func(ch *amqp091.Channel) error { return ch.Qos(1, 4096, false) }},
		{"channel.flow active=false", 540, func(ch *amqp091.Channel) error { return ch.Flow(false) }},
		{"immediate", 540, func(ch *amqp091.Channel) error {
			ch.Publish("", "q", false, true, amqp091.Publishing{})
			_, err := ch.QueueDeclare("q", false, false, false, false, nil)
			return err
		}},
		{"unknown exchange type", 503, func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclare("x", "x-bogus", false, false, false, false, nil)
		}},
	} {
		conn := b.dial()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := exception(t, ch, tc.do); !isCode(err, tc.code) {
			t.Errorf("%s: %v, want %d", tc.name, err, tc.code)
		}
	}
	if _, err := b.channel().QueueDeclare("still", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
}

// Publisher confirms of pipelined publishes cover every publish exactly
// once; acks confirmed together go out as one basic.ack with
// multiple=true.
func TestConfirmsCoalesced(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("many", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, b)
	c.open()
	c.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
	c.method()
	c.send(wire.AppendMethodFrame(nil, 1, &wire.ConfirmSelect{}))
	if _, ok := c.method().(*wire.ConfirmSelectOk); !ok {
		t.Fatal("no confirm.select-ok")
	}
	const n = 300
	var buf []byte
	props := []byte{0x10, 0, 2} // delivery-mode 2
	for range n {
		buf = wire.AppendMethodFrame(buf, 1, &wire.BasicPublish{RoutingKey: "many"})
		buf = wire.AppendFrame(buf, wire.FrameHeader, 1, wire.AppendHeader(nil, 3, props))
		buf = wire.AppendFrame(buf, wire.FrameBody, 1, []byte("abc"))
	}
	c.send(buf)
	// A single ack confirms its tag (once); a multiple one every tag up
	// to it not yet confirmed, and it may not repeat its own tag.
	confirmed, frames := map[uint64]bool{}, 0
	for len(confirmed) < n {
		m := c.method()
		a, ok := m.(*wire.BasicAck)
		if !ok || a.DeliveryTag == 0 || a.DeliveryTag > n || confirmed[a.DeliveryTag] {
			t.Fatalf("got %s %+v with %d confirmed", m.Name(), m, len(confirmed))
		}
		frames++
		confirmed[a.DeliveryTag] = true
		for tag := a.DeliveryTag - 1; a.Multiple && tag > 0; tag-- {
			confirmed[tag] = true
		}
	}
	if frames == n {
		t.Errorf("%d publishes sent at once were confirmed by %d separate acks", n, frames)
	}
	if q, err := ch.QueueDeclarePassive("many", true, false, false, false, nil); err != nil || q.Messages != n {
		t.Fatalf("queue: %+v %v", q, err)
	}
}

// confirmSeq with confirms out of publish order: a multiple ack covers
// only publishes that are all confirmed; out-of-order acks and nacks go
// out alone.
func TestConfirmSeqOutOfOrder(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	c := newConn(&Server{}, server)
	ch := newChannel(c, 1)
	frames := make(chan wire.Method, 16)
	go func() {
		fr := wire.NewFrameReader(client)
		for {
			f, err := fr.ReadFrame(1 << 20)
			if err != nil {
				close(frames)
				return
			}
			m, _ := wire.ReadMethod(f.Payload)
			frames <- m
		}
	}()
	for _, s := range []struct {
		seq uint64
		ok  bool
	}{{2, true}, {1, true}, {3, true}, {5, false}, {4, true}} {
		ch.confirmSeq(s.seq, s.ok)
	}
	c.flushAcks()
	server.Close()
	var got []string
	for m := range frames {
		switch m := m.(type) {
		case *wire.BasicAck:
			got = append(got, fmt.Sprintf("ack %d %v", m.DeliveryTag, m.Multiple))
		case *wire.BasicNack:
			got = append(got, fmt.Sprintf("nack %d %v", m.DeliveryTag, m.Multiple))
		}
	}
	if want := "[ack 2 false ack 3 true nack 5 false ack 4 false]"; fmt.Sprint(got) != want {
		t.Fatalf("confirms %v, want %s", got, want)
	}
}

// A content header announcing a large body costs the client a few bytes;
// the broker must not take the announced size in memory before the body
// comes, or a connection with a publish begun on each of its channels
// holds channels × MaxMessageBytes.
func TestAnnouncedBodySizeIsNotAllocatedUpFront(t *testing.T) {
	b := startBroker(t)
	if _, err := b.channel().QueueDeclare("q", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, b)
	c.send(wire.ProtocolHeader)
	c.method() // start
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US"}))
	c.method() // tune
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionTuneOk{FrameMax: 4096}))
	c.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionOpen{VirtualHost: "/"}))
	if _, ok := c.method().(*wire.ConnectionOpenOk); !ok {
		t.Fatal("no open-ok")
	}
	const channels = 32
	for id := uint16(1); id <= channels; id++ {
		c.send(wire.AppendMethodFrame(nil, id, &wire.ChannelOpen{}))
		if _, ok := c.method().(*wire.ChannelOpenOk); !ok {
			t.Fatal("no channel.open-ok")
		}
	}
	limit := b.srv.cfg.MaxMessageBytes
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var b2 []byte
	for id := uint16(1); id <= channels; id++ {
		b2 = wire.AppendMethodFrame(b2, id, &wire.BasicPublish{RoutingKey: "q"})
		b2 = wire.AppendFrame(b2, wire.FrameHeader, id, wire.AppendHeader(nil, uint64(limit), []byte{0, 0}))
	}
	c.send(b2)
	// The reader handles frames in order: once this open-ok is back,
	// every header above was read.
	c.send(wire.AppendMethodFrame(nil, channels+1, &wire.ChannelOpen{}))
	if _, ok := c.method().(*wire.ChannelOpenOk); !ok {
		t.Fatal("no channel.open-ok")
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > channels*int64(limit)/8 {
		t.Fatalf("%d headers announcing %d bytes each (no body sent) took %d bytes of heap", channels, limit, grown)
	}
	// A body in several frames is still put together whole.
	id := uint16(channels + 1)
	body := bytes.Repeat([]byte("0123456789"), 1000)
	msg := wire.AppendMethodFrame(nil, id, &wire.BasicPublish{RoutingKey: "q"})
	msg = wire.AppendFrame(msg, wire.FrameHeader, id, wire.AppendHeader(nil, uint64(len(body)), []byte{0, 0}))
	for rest := body; len(rest) > 0; {
		n := min(len(rest), 4000)
		msg = wire.AppendFrame(msg, wire.FrameBody, id, rest[:n])
		rest = rest[n:]
	}
	c.send(append(msg, wire.AppendMethodFrame(nil, id, &wire.BasicGet{Queue: "q", NoAck: true})...))
	if m, ok := c.method().(*wire.BasicGetOk); !ok {
		t.Fatalf("got %s, want basic.get-ok", m.Name())
	}
	var got []byte
	for len(got) < len(body) {
		f, err := c.fr.ReadFrame(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		if f.Type == wire.FrameBody {
			got = append(got, f.Payload...)
		}
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("a body sent in %d frames came back as %d different bytes", (len(body)+3999)/4000, len(got))
	}
}

// The channel-max a client asks for in tune-ok, when lower than the
// server's, is the connection's: a channel above it is refused with 504.
func TestClientsChannelMaxIsKept(t *testing.T) {
	b := startBroker(t)
	c := dialRaw(t, b)
	c.open() // channel-max 10
	c.send(wire.AppendMethodFrame(nil, 10, &wire.ChannelOpen{}))
	if _, ok := c.method().(*wire.ChannelOpenOk); !ok {
		t.Fatal("channel 10 (the client's channel-max) not opened")
	}
	c.send(wire.AppendMethodFrame(nil, 11, &wire.ChannelOpen{}))
	c.expectClose(wire.ChannelError)
}
