package watermark

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestReleaseCallsReachedWaitersInOrder(t *testing.T) {
	m := New("test", nil)
	var got []int64
	for _, off := range []int64{10, 5, 20, 7} {
		m.Notify(off, 0, func(err error) {
			if err != nil {
				t.Errorf("offset %d: %v", off, err)
			}
			got = append(got, off)
		})
	}
	if len(got) != 0 {
		t.Fatalf("called before the mark moved: %v", got)
	}
	if !m.Advance(10) {
		t.Fatal("Advance does not report waiters")
	}
	m.Release()
	if want := []int64{10, 5, 7}; len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("called %v, want %v", got, want)
	}
	if m.Advance(9); m.Load() != 10 {
		t.Fatalf("moved back to %d", m.Load())
	}
	m.Notify(3, 0, func(error) { got = append(got, 3) })
	if got[len(got)-1] != 3 {
		t.Fatal("a reached offset is not answered at once")
	}
	m.Advance(20)
	m.Release()
	if got[len(got)-1] != 20 || m.Waiting() {
		t.Fatalf("after 20: %v, waiting %v", got, m.Waiting())
	}
}

func TestDemandOnlyForUnreachedOffsets(t *testing.T) {
	var asked atomic.Int32
	m := New("test", func() { asked.Add(1) })
	m.Advance(5)
	m.Notify(5, 0, func(error) {})
	if asked.Load() != 0 {
		t.Fatal("demand for a reached offset")
	}
	m.Notify(6, 0, func(error) {})
	if asked.Load() != 1 {
		t.Fatal("no demand for an unreached offset")
	}
}

func TestWaitBlocksUntilReached(t *testing.T) {
	m := New("test", nil)
	done := make(chan error)
	go func() { done <- m.Wait(context.Background(), 100, 0) }()
	waitRegistered(t, m)
	m.Advance(99)
	m.Release()
	select {
	case err := <-done:
		t.Fatalf("returned %v below the offset", err)
	default:
	}
	m.Advance(100)
	m.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWaitContextEndsAndForgetsTheWaiter(t *testing.T) {
	m := New("test", nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Wait(ctx, 100, 0) }()
	waitRegistered(t, m)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	if m.Waiting() {
		t.Fatal("a cancelled waiter stays registered")
	}
}

func TestTimeout(t *testing.T) {
	m := New("test", nil)
	errc := make(chan error, 2)
	m.Notify(10, time.Hour, func(err error) { errc <- err })
	m.Notify(10, 20*time.Millisecond, func(err error) { errc <- err })
	if err := <-errc; !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v", err)
	}
	if err := m.Wait(context.Background(), 10, 10*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Wait: %v", err)
	}
	m.Advance(10)
	m.Release()
	if err := <-errc; err != nil {
		t.Fatalf("the hour-long waiter: %v", err)
	}
}

// TestFailRacesRegistrations: registrations concurrent with Fail are each
// answered exactly once, those not reached with the failure.
func TestFailRacesRegistrations(t *testing.T) {
	boom := errors.New("boom")
	for range 50 {
		m := New("test", nil)
		var wg sync.WaitGroup
		var calls, failed atomic.Int32
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 50 {
					m.Notify(int64(1+i*50+j), 0, func(err error) {
						calls.Add(1)
						if errors.Is(err, boom) {
							failed.Add(1)
						}
					})
				}
			}()
		}
		m.Fail(boom)
		wg.Wait()
		if calls.Load() != 400 || failed.Load() != 400 {
			t.Fatalf("%d calls, %d with the failure, want 400", calls.Load(), failed.Load())
		}
		if !errors.Is(m.Err(), boom) {
			t.Fatal(m.Err())
		}
	}
}

func TestClose(t *testing.T) {
	m := New("test", nil)
	closed := errors.New("closed")
	outcome := func(off int64) error {
		if m.Load() >= off {
			return nil
		}
		return closed
	}
	var got []error
	m.Notify(5, time.Hour, func(err error) { got = append(got, err) })
	m.Close(outcome)
	m.Notify(6, 0, func(err error) { got = append(got, err) })
	if len(got) != 2 || !errors.Is(got[0], closed) || !errors.Is(got[1], closed) {
		t.Fatalf("got %v", got)
	}
}

// TestNoLostWakeup: a waiter that registers while the offset moves past
// it and Release runs is still called back at once. Release skips its
// scan when it sees no waiter; a waiter that checked the offset before the
// move and counted itself in after Release's look was left until the next
// Release or its timeout (acks=all answers delayed by a whole timeout).
var spin atomic.Int64

func TestNoLostWakeup(t *testing.T) {
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	for i := range rounds {
		m := New("t", nil)
		done := make(chan error, 1)
		started := make(chan struct{})
		go func() {
			close(started)
			done <- m.Wait(context.Background(), 1, 2*time.Second)
		}()
		<-started
		for j := 0; j < i%512; j++ { // move the Advance across the waiter's registration
			spin.Add(1)
		}
		m.Advance(1)
		m.Release() // the dispatcher's way: Release after every round
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: %v", i, err)
			}
		case <-time.After(time.Second):
			t.Fatalf("round %d: the waiter was not woken although the offset passed it", i)
		}
	}
}

// waitRegistered waits, with a deadline, until a waiter is registered on m.
func waitRegistered(t *testing.T, m *Mark) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !m.Waiting() {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never registered")
		}
		time.Sleep(time.Millisecond)
	}
}
