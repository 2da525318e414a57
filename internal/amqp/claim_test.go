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
	gate := make(chan struct{})
	var gateOnce sync.Once
	fb := &countingBudget{gate: gate}
	b := &broker{t: t, dir: t.TempDir(), frameBudget: fb}
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
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if fb.claims < 3 || fb.held != 0 {
		t.Fatalf("%d claims, %d bytes still held", fb.claims, fb.held)
	}
}

// countingBudget counts claims and held bytes; a claim above 1000 bytes
// (the message body of TestClaimFrame) waits for gate.
type countingBudget struct {
	gate         chan struct{}
	mu           sync.Mutex
	held, claims int64
}

func (b *countingBudget) ClaimBytes(n int64, done <-chan struct{}) bool {
	b.mu.Lock()
	b.claims++
	b.held += n
	b.mu.Unlock()
	if n > 1000 {
		select {
		case <-b.gate:
		case <-done:
			b.ReleaseBytes(n)
			return false
		}
	}
	return true
}

func (b *countingBudget) TryClaimBytes(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.claims++
	b.held += n
	return true
}

func (b *countingBudget) CapacityBytes() int64 { return 1 << 30 }

func (b *countingBudget) ReleaseBytes(n int64) {
	b.mu.Lock()
	b.held -= n
	b.mu.Unlock()
}

// frameBudgetOrNil is b.frameBudget for the Config.
func (b *broker) frameBudgetOrNil() FrameBudget { return b.frameBudget }
