package core

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
)

var testHost = netip.MustParseAddrPort("127.0.0.1:10911")

func put(t *testing.T, b *Broker, topic string, queueID int32, tags string) {
	t.Helper()
	props := ""
	if tags != "" {
		props = message.SetProperty("", message.PropTags, tags)
	}
	m := &message.Message{Topic: topic, QueueID: queueID, BornHost: testHost, StoreHost: testHost, Body: []byte("x"), Properties: props}
	if res := b.Store().PutMessage(context.Background(), m); res.Status != store.PutOK {
		t.Fatalf("put: %v %v", res.Status, res.Err)
	}
}

// waitErr runs WaitForData on a goroutine of its own.
func waitErr(ctx context.Context, b *Broker, topic string, queueID int32, offset int64) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.WaitForData(ctx, topic, queueID, offset) }()
	return ch
}

func waitHeld(t *testing.T, b *Broker, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for b.HeldWaits() != n {
		if time.Now().After(deadline) {
			t.Fatalf("held waits %d, want %d", b.HeldWaits(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWaitForDataWakesOnDispatch: a wait past the end of a queue returns
// once a message is dispatched to that queue, not to another one.
func TestWaitForDataWakesOnDispatch(t *testing.T) {
	b := newTestBroker(t, nil)
	done := waitErr(context.Background(), b, "T", 0, 0)
	waitHeld(t, b, 1)
	put(t, b, "T", 1, "") // another queue
	put(t, b, "U", 0, "") // another topic
	select {
	case err := <-done:
		t.Fatalf("woken by another queue's message: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	put(t, b, "T", 0, "")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b.HeldWaits() != 0 {
		t.Fatalf("%d waits still held", b.HeldWaits())
	}
	// Data already there: the re-check after registering wakes at once.
	if err := b.WaitForData(context.Background(), "T", 0, 0); err != nil {
		t.Fatal(err)
	}
}

// TestWaitForDataEndsWithItsContextAndAtClose.
func TestWaitForDataEndsWithItsContextAndAtClose(t *testing.T) {
	b := newTestBroker(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := waitErr(ctx, b, "T", 0, 0)
	waitHeld(t, b, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %v", err)
	}
	waitHeld(t, b, 0)
	done = waitErr(context.Background(), b, "T", 0, 0)
	waitHeld(t, b, 1)
	b.Close()
	if err := <-done; err != nil {
		t.Fatalf("at close: %v", err)
	}
	if err := b.WaitForData(context.Background(), "T", 0, 0); err != nil {
		t.Fatalf("after close: %v", err)
	}
}

type countWaker struct{ n chan struct{} }

func (w countWaker) Wake() { w.n <- struct{}{} }

type tagsOnly int64

func (c tagsOnly) MatchCode(code int64) bool { return int64(c) == code }

// TestHoldMatchesTagsTimesOutAndIsBounded: a held wait wakes only for an
// entry its matcher accepts, wakes once at its timeout otherwise, and
// MaxWaits bounds the waits held.
func TestHoldMatchesTagsTimesOutAndIsBounded(t *testing.T) {
	b := newTestBroker(t, func(c *Config) { c.MaxWaits = 1 })
	w := countWaker{make(chan struct{}, 2)}
	hold := &Wait{Topic: "T", QueueID: 0, Offset: 0, Match: tagsOnly(message.TagsCode("B")), Waker: w}
	if !b.Hold(hold, time.Hour) {
		t.Fatal("not held")
	}
	if b.Hold(&Wait{Topic: "T", Waker: w}, time.Hour) {
		t.Fatal("held beyond MaxWaits")
	}
	if err := b.WaitForData(context.Background(), "T", 0, 0); !errors.Is(err, ErrBusy) {
		t.Fatalf("WaitForData beyond MaxWaits: %v", err)
	}
	put(t, b, "T", 0, "A")
	select {
	case <-w.n:
		t.Fatal("woken by a tag it does not match")
	case <-time.After(50 * time.Millisecond):
	}
	put(t, b, "T", 0, "B")
	<-w.n
	timed := &Wait{Topic: "T", QueueID: 0, Offset: 5, Waker: w}
	start := time.Now()
	if !b.Hold(timed, 20*time.Millisecond) {
		t.Fatal("not held")
	}
	<-w.n
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("woken after %v, before its timeout", d)
	}
	waitHeld(t, b, 0)
	select {
	case <-w.n:
		t.Fatal("woken twice")
	case <-time.After(30 * time.Millisecond):
	}
}
