package amqp

import (
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestClaimFrame: after the handshake every frame is claimed at its size
// before its payload is read and given back once handled; while a claim
// waits the connection reads nothing (the publish is not confirmed).
func TestClaimFrame(t *testing.T) {
	var mu sync.Mutex
	var held, claims int64
	gate := make(chan struct{})
	var gateOnce sync.Once
	b := &broker{t: t, dir: t.TempDir()}
	b.claimFrame = func(n int64, done <-chan struct{}) (func(), bool) {
		mu.Lock()
		claims++
		held += n
		mu.Unlock()
		if n > 1000 { // the message body below
			select {
			case <-gate:
			case <-done:
				return nil, false
			}
		}
		return func() { mu.Lock(); held -= n; mu.Unlock() }, true
	}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	if err := ch.Publish("", "q", false, false, amqp091.Publishing{Body: make([]byte, 5000)}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-confirms:
		t.Fatal("confirmed while the body frame's claim waited")
	case <-time.After(200 * time.Millisecond):
	}
	gateOnce.Do(func() { close(gate) })
	select {
	case c := <-confirms:
		if !c.Ack {
			t.Fatal("nacked")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not confirmed once the claim was granted")
	}
	ch.Close()
	b.stop()
	mu.Lock()
	defer mu.Unlock()
	if claims < 3 || held != 0 {
		t.Fatalf("%d claims, %d bytes still held", claims, held)
	}
}
