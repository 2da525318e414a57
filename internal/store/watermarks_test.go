package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/watermark"
	"github.com/keelmq/keel/internal/vfs"
)

// TestWatermarksAfterPut: a SYNC_FLUSH put returns with the record
// written, flushed, replicated and confirmed; WaitFor(Visible) returns once
// it is readable, and the offsets keep their order.
func TestWatermarksAfterPut(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	m := newMsg("W", 0, "x", nil)
	put(t, s, m)
	end := m.PhysOffset + int64(m.StoredSize()) + 4
	for _, w := range []Watermark{Written, Flushed, Replicated, Confirmed} {
		if got := s.Offset(w); got < end {
			t.Fatalf("%v at %d after the put ended at %d", w, got, end)
		}
	}
	if err := s.WaitFor(context.Background(), Visible, end, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if s.MaxOffset("W", 0) != 1 {
		t.Fatal("visible but not readable")
	}
	st := s.Stats()
	if !(st.WrittenOffset >= st.FlushedOffset && st.FlushedOffset >= st.ReplicatedOffset &&
		st.ReplicatedOffset == st.ConfirmedOffset && st.ConfirmedOffset >= st.VisibleOffset) {
		t.Fatalf("watermarks out of order: %+v", st)
	}
}

// TestNotifyVisibleAndTimeout: the callback form answers a waiter on
// Visible from the dispatcher, and one that cannot be reached with a
// timeout.
func TestNotifyVisibleAndTimeout(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	errc := make(chan error, 2)
	s.Notify(Visible, 1, 0, func(err error) { errc <- err })
	s.Notify(Visible, 1<<40, 20*time.Millisecond, func(err error) { errc <- err })
	put(t, s, newMsg("W", 0, "x", nil))
	for range 2 {
		err := <-errc
		if err != nil && !errors.Is(err, watermark.ErrTimeout) {
			t.Fatal(err)
		}
	}
}

// TestOnVisibleSeveralSubscribers: every subscriber hears of every new
// ConsumeQueue entry until it unsubscribes.
func TestOnVisibleSeveralSubscribers(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	a, b := make(chan string, 10), make(chan string, 10)
	removeA := s.OnVisible(func(topic string, qid int32, qo, _ int64) { a <- fmt.Sprintf("%s/%d@%d", topic, qid, qo) })
	s.OnVisible(func(topic string, qid int32, qo, _ int64) { b <- fmt.Sprintf("%s/%d@%d", topic, qid, qo) })
	put(t, s, newMsg("V", 1, "x", nil))
	if ga, gb := <-a, <-b; ga != "V/1@0" || gb != "V/1@0" {
		t.Fatalf("subscribers got %s and %s", ga, gb)
	}
	removeA()
	put(t, s, newMsg("V", 1, "y", nil))
	if gb := <-b; gb != "V/1@1" {
		t.Fatalf("got %s", gb)
	}
	select {
	case g := <-a:
		t.Fatalf("removed subscriber got %s", g)
	default:
	}
}

// TestExternalReplicationHoldsAckAndVisibility: with ExternalReplication a
// SYNC_FLUSH put that is flushed is neither acknowledged nor visible until
// the replication service reports it replicated.
func TestExternalReplicationHoldsAckAndVisibility(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	cfg.ExternalReplication = true
	s := mustOpen(t, cfg)
	defer s.Close()
	m := newMsg("R", 0, "x", nil)
	acked := make(chan PutResult, 1)
	if r, pending := s.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r PutResult) { acked <- r }); !pending {
		t.Fatalf("not pending: %v", r)
	}
	end := m.PhysOffset + int64(m.StoredSize()) + 4
	if err := s.WaitFor(context.Background(), Flushed, end, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	s.dispatchRound() // what the flush's notification leads to
	select {
	case r := <-acked:
		t.Fatalf("acknowledged before replication: %v", r)
	default:
	}
	if s.MaxOffset("R", 0) != 0 || s.Offset(Replicated) >= end {
		t.Fatalf("visible or replicated before replication: max %d, replicated %d", s.MaxOffset("R", 0), s.Offset(Replicated))
	}
	s.AdvanceReplicated(end)
	if r := <-acked; r.Status != PutOK {
		t.Fatalf("ack: %v", r)
	}
	if err := s.WaitFor(context.Background(), Visible, end, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if s.MaxOffset("R", 0) != 1 {
		t.Fatal("not readable after replication")
	}
}

// TestReleaseReplicatedAnswersOnCallersGoroutine: ReleaseReplicated answers
// the puts a reported offset covers before it returns, on the caller's
// goroutine, even while the dispatcher is busy with a round (here held in
// a Visible subscriber): a synchronous master's ack does not wait for
// dispatch.
func TestReleaseReplicatedAnswersOnCallersGoroutine(t *testing.T) {
	s, held, release := masterWithHeldDispatcher(t)
	put := func(topic string) (int64, chan PutResult) {
		m := newMsg(topic, 0, "x", nil)
		acked := make(chan PutResult, 1)
		if r, pending := s.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r PutResult) { acked <- r }); !pending {
			t.Fatalf("not pending: %v", r)
		}
		end := m.PhysOffset + int64(m.StoredSize()) + 4
		if err := s.WaitFor(context.Background(), Flushed, end, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		return end, acked
	}
	endA, ackedA := put("A")
	s.AdvanceReplicated(endA)
	if r := <-ackedA; r.Status != PutOK {
		t.Fatalf("first ack: %v", r)
	}
	<-held // the dispatcher is inside its round, dispatching A
	endB, ackedB := put("B")
	s.AdvanceReplicated(endB)
	s.ReleaseReplicated()
	select {
	case r := <-ackedB:
		if r.Status != PutOK {
			t.Fatalf("second ack: %v", r)
		}
	default:
		t.Fatal("ReleaseReplicated returned without answering the put it covers")
	}
	if got := s.Offset(Replicated); got < endB {
		t.Fatalf("replicated %d, want at least %d", got, endB)
	}
	release()
	if err := s.WaitFor(context.Background(), Visible, endB, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestReplicatedFollowsFlushWhileDispatcherBusy: on a synchronous master
// whose replicas confirmed a put before its own fdatasync ended, the put is
// answered once that fdatasync ends, by the acknowledger, even while the
// dispatcher is busy with a round (here held in a Visible subscriber) and
// no further report comes.
func TestReplicatedFollowsFlushWhileDispatcherBusy(t *testing.T) {
	s, held, release := masterWithHeldDispatcher(t)
	put := func(topic string) (int64, chan PutResult) {
		m := newMsg(topic, 0, "x", nil)
		acked := make(chan PutResult, 1)
		if r, pending := s.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r PutResult) { acked <- r }); !pending {
			t.Fatalf("not pending: %v", r)
		}
		return m.PhysOffset + int64(m.StoredSize()) + 4, acked
	}
	// The replicas confirm ahead of the local log: from now on only the
	// local fdatasync holds a put back.
	s.AdvanceReplicated(1 << 40)
	_, ackedA := put("A")
	if r := <-ackedA; r.Status != PutOK {
		t.Fatalf("first ack: %v", r)
	}
	<-held // the dispatcher is inside its round, dispatching A
	endB, ackedB := put("B")
	select {
	case r := <-ackedB:
		if r.Status != PutOK {
			t.Fatalf("second ack: %v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the put was not answered after its flush while the dispatcher was busy (flushed %d, replicated %d, put ends at %d)",
			s.Offset(Flushed), s.Offset(Replicated), endB)
	}
	if got := s.Offset(Replicated); got < endB {
		t.Fatalf("replicated %d, want at least %d", got, endB)
	}
	release()
	if err := s.WaitFor(context.Background(), Visible, endB, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// masterWithHeldDispatcher opens a synchronous master's store
// (ExternalReplication, SYNC_FLUSH) whose dispatcher stops inside its round
// at the first record of topic "A": held receives then, and the round goes
// on once release is called (idempotent; the store is closed at the test's
// end).
func masterWithHeldDispatcher(t *testing.T) (s *Store, held <-chan struct{}, release func()) {
	t.Helper()
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	cfg.ExternalReplication = true
	s = mustOpen(t, cfg)
	hold, h := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	remove := s.OnVisible(func(topic string, _ int32, _ int64, _ int64) {
		if topic == "A" {
			h <- struct{}{}
			<-hold // the dispatcher's round goes on only once the test lets it
		}
	})
	t.Cleanup(func() {
		release()
		remove()
		s.Close()
	})
	return s, h, release
}
