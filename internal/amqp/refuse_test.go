package amqp

import (
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestServeRefusals: a client gets 530 NOT_ALLOWED with the reason at
// connection.open (each connection reads the reason anew), a wrong
// protocol header gets the supported one back, and closing the listener
// ends the server.
func TestServeRefusals(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reason := "broker broker-a is a slave: connect to its master"
	var n atomic.Int32
	done := make(chan error, 1)
	go func() {
		done <- ServeRefusals(ln, func() string { n.Add(1); return reason }, nil)
	}()
	for range 2 {
		_, err = amqp091.Dial("amqp://guest:guest@" + ln.Addr().String() + "/")
		var ae *amqp091.Error
		if !errors.As(err, &ae) || ae.Code != amqp091.NotAllowed || !strings.Contains(ae.Reason, reason) {
			t.Fatalf("dial: %v, want 530 NOT_ALLOWED naming %q", err, reason)
		}
	}
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	nc.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
	got, _ := io.ReadAll(nc)
	nc.Close()
	if string(got) != string(wire.ProtocolHeader) {
		t.Errorf("a wrong header got %q, want the protocol header", got)
	}
	ln.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeRefusals did not end with its listener")
	}
	if n.Load() != 3 {
		t.Errorf("reason read %d times, want once per connection (3)", n.Load())
	}
}
