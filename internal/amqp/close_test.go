package amqp

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
)

// TestCloseWhilePublishing: amqp091-go closing its connection while
// another of its goroutines is still publishing gets the close-ok (Close
// returns no error), every time; TestCloseOkThenEndOfStream checks at the
// socket that such writes are read, not reset.
func TestCloseWhilePublishing(t *testing.T) {
	b := startBroker(t)
	if _, err := b.channel().QueueDeclare("closing", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	body := bytes.Repeat([]byte("p"), 2000)
	for round := range 5 {
		conn, err := amqp091.Dial(b.url())
		if err != nil {
			t.Fatal(err)
		}
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		var sent atomic.Int64
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			for {
				if err := ch.Publish("", "closing", false, false, amqp091.Publishing{Body: body}); err != nil {
					return // the connection is closing
				}
				sent.Add(1)
			}
		}()
		waitUntil(t, "2000 messages published", func() bool { return sent.Load() >= 2000 })
		if err := conn.Close(); err != nil {
			t.Fatalf("round %d: Close while publishing (%d sent): %v", round, sent.Load(), err)
		}
		<-stopped
	}
}

// TestCloseOkThenEndOfStream: at the socket, a client that writes
// connection.close followed by megabytes of publishes (written before it
// read the close-ok) reads the close-ok and then the end of the stream,
// and its writes are not reset: the broker reads and drops what follows
// the close before it closes the socket.
func TestCloseOkThenEndOfStream(t *testing.T) {
	b := startBroker(t)
	if _, err := b.channel().QueueDeclare("closing", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	c := dialRaw(t, b)
	c.open()
	c.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
	if _, ok := c.method().(*wire.ChannelOpenOk); !ok {
		t.Fatal("no channel.open-ok")
	}
	out := wire.AppendMethodFrame(nil, 0, &wire.ConnectionClose{ReplyCode: 200, ReplyText: "bye"})
	body := bytes.Repeat([]byte("p"), 4000)
	for len(out) < 16<<20 { // more than the socket buffers hold
		out = wire.AppendMethodFrame(out, 1, &wire.BasicPublish{RoutingKey: "closing"})
		out = wire.AppendFrame(out, wire.FrameHeader, 1, wire.AppendHeader(nil, uint64(len(body)), []byte{0, 0}))
		out = wire.AppendFrame(out, wire.FrameBody, 1, body)
	}
	wrote := make(chan error, 1)
	go func() { _, err := c.nc.Write(out); wrote <- err }()
	if _, ok := c.method().(*wire.ConnectionCloseOk); !ok {
		t.Fatal("no connection.close-ok")
	}
	if _, err := c.fr.ReadFrame(1 << 20); !errors.Is(err, io.EOF) {
		t.Fatalf("after close-ok: %v, want the end of the stream", err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the client's writes after its close: %v (the broker reset the connection under unread bytes)", err)
	}
}

// TestLargeMessage: a message above RocketMQ's 4 MiB default, up to the
// door's max message size, is stored and delivered whole (in many body
// frames both ways); one above it closes the channel with 406 naming the
// limit.
func TestLargeMessage(t *testing.T) {
	const size = 24 << 20
	b := &broker{t: t, dir: t.TempDir(), storeCfg: func(c *store.Config) {
		c.CommitLogSegmentBytes = 64 << 20
		c.MaxRecordBodyBytes = size
	}}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if _, err := ch.QueueDeclare("big", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 7 / 3)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", "big", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: body})
	if err != nil {
		t.Fatal(err)
	}
	if !dc.Wait() {
		t.Fatal("a 24 MiB message was nacked")
	}
	msgs, err := ch.Consume("big", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-msgs:
		if len(d.Body) != size || sha256.Sum256(d.Body) != sha256.Sum256(body) {
			t.Fatalf("delivered %d bytes, not the %d published", len(d.Body), size)
		}
		d.Ack(false)
	case <-time.After(30 * time.Second):
		t.Fatal("the large message was not delivered")
	}
	// One byte above the limit: 406 on the channel.
	ch2 := b.channel()
	closed := ch2.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch2.Publish("", "big", false, false, amqp091.Publishing{Body: make([]byte, size+1)}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != wire.PreconditionFailed || !bytes.Contains([]byte(e.Reason), fmt.Appendf(nil, "max size %d", size)) {
			t.Fatalf("above the limit: %v, want 406 naming max size %d", e, size)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a message above the limit did not close the channel")
	}
}

// TestMaxMessageAboveStoreRefused: the door's limit may not exceed what
// the store takes in one record; left at 0 it is 128 MiB or the store's
// limit, the smaller.
func TestMaxMessageAboveStoreRefused(t *testing.T) {
	b := startBroker(t)
	dflt, err := New(Config{DataDir: t.TempDir()}, b.st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := dflt.cfg.MaxMessageBytes; got != b.st.MaxRecordBodyBytes() {
		t.Errorf("default limit on a store of %d-byte records: %d", b.st.MaxRecordBodyBytes(), got)
	}
	dflt.Close()
	_, err = New(Config{DataDir: t.TempDir(), MaxMessageBytes: b.st.MaxRecordBodyBytes() + 1}, b.st, nil)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("MaxRecordBodyBytes")) {
		t.Fatalf("New with a limit above the store's: %v", err)
	}
}
