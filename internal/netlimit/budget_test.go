package netlimit

import (
	"context"
	"errors"
	"testing"
	"time"
)

// acquireAsync starts an Acquire and returns the channel its result
// arrives on.
func acquireAsync(d *Door, n int64) <-chan Claim {
	ch := make(chan Claim, 1)
	go func() {
		c, err := d.Acquire(context.Background(), n)
		if err != nil {
			panic(err)
		}
		ch <- c
	}()
	return ch
}

// waitWaiting waits until door d counts n waiting requests.
func waitWaiting(t *testing.T, d *Door, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for d.waiting.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("door %s: %d waiting, want %d", d.name, d.waiting.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestBudgetBackpressure(t *testing.T) {
	b := NewBudget(100)
	d := b.Door("kafka")
	c1, err := d.Acquire(context.Background(), 60)
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(d, 50)
	waitWaiting(t, d, 1)
	select {
	case <-ch:
		t.Fatal("granted 50 bytes beyond a budget of 100 with 60 held")
	default:
	}
	if got := b.HeldBytes(); got != 60 {
		t.Fatalf("held %d, want 60", got)
	}
	c1.Release()
	c2 := <-ch
	if got := b.Stats()[0]; got.HeldBytes != 50 || got.Waiting != 0 || got.Waited != 1 {
		t.Fatalf("stats %+v", got)
	}
	c2.Release()
	c2.Release() // idempotent
	if b.HeldBytes() != 0 {
		t.Fatalf("held %d after release", b.HeldBytes())
	}
}

func TestBudgetLargerThanCapacityWhenAlone(t *testing.T) {
	b := NewBudget(10)
	d := b.Door("x")
	c, err := d.Acquire(context.Background(), 50)
	if err != nil {
		t.Fatal(err)
	}
	ch := acquireAsync(d, 1)
	waitWaiting(t, d, 1)
	c.Release()
	c3 := <-ch
	c3.Release()
}

// A grower goes before a new request, and when every holder waits to grow
// the first is granted beyond the capacity: no deadlock.
func TestBudgetGrowNeverDeadlocks(t *testing.T) {
	b := NewBudget(100)
	d := b.Door("kafka")
	a, _ := d.Acquire(context.Background(), 50)
	c, _ := d.Acquire(context.Background(), 50)
	newReq := acquireAsync(d, 10)
	waitWaiting(t, d, 1)
	grown := make(chan struct{})
	go func() {
		if err := a.Grow(context.Background(), 40); err != nil {
			panic(err)
		}
		close(grown)
	}()
	waitWaiting(t, d, 2)
	// c is not waiting: a must wait for it.
	select {
	case <-grown:
		t.Fatal("grow granted while another holder could still release")
	default:
	}
	cGrown := make(chan error, 1)
	go func() { cGrown <- c.Grow(context.Background(), 30) }()
	<-grown // every holder waits now: the first goes beyond the capacity
	if b.overdrafts != 1 || b.HeldBytes() != 140 {
		t.Fatalf("overdrafts %d, held %d; want 1 and 140", b.overdrafts, b.HeldBytes())
	}
	a.Release()
	if err := <-cGrown; err != nil {
		t.Fatal(err)
	}
	c.Release()
	c4 := <-newReq
	c4.Release()
	if b.HeldBytes() != 0 {
		t.Fatalf("held %d", b.HeldBytes())
	}
}

func TestBudgetCancel(t *testing.T) {
	b := NewBudget(10)
	d := b.Door("x")
	c, _ := d.Acquire(context.Background(), 10)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := d.Acquire(ctx, 5)
		errc <- err
	}()
	waitWaiting(t, d, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	c.Release()
	if b.HeldBytes() != 0 || d.waiting.Load() != 0 {
		t.Fatalf("held %d waiting %d", b.HeldBytes(), d.waiting.Load())
	}
	// The budget still serves.
	c2, err := d.Acquire(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	c2.Release()
}

// Many goroutines acquiring, growing and releasing never hold more than
// the capacity plus one growth.
func TestBudgetConcurrent(t *testing.T) {
	b := NewBudget(1000)
	d := b.Door("x")
	done := make(chan struct{})
	for g := 0; g < 16; g++ {
		go func(g int) {
			defer func() { done <- struct{}{} }()
			for i := 0; i < 300; i++ {
				c, err := d.Acquire(context.Background(), int64(50+g*7+i%13))
				if err != nil {
					panic(err)
				}
				if err := c.Grow(context.Background(), int64(i%97)); err != nil {
					panic(err)
				}
				if h := b.HeldBytes(); h > 1000+97 {
					panic("held beyond capacity plus one growth")
				}
				c.Release()
			}
		}(g)
	}
	for g := 0; g < 16; g++ {
		<-done
	}
	if b.HeldBytes() != 0 {
		t.Fatalf("held %d", b.HeldBytes())
	}
}

// A small request that fits passes a large one waiting for room.
func TestBudgetSmallPassesLarge(t *testing.T) {
	b := NewBudget(6400)
	d := b.Door("x")
	c, _ := d.Acquire(context.Background(), 5000)
	large := acquireAsync(d, 3000)
	waitWaiting(t, d, 1)
	small, err := d.Acquire(context.Background(), 100) // 1/64 of the capacity
	if err != nil {
		t.Fatal(err)
	}
	mid := acquireAsync(d, 200) // not small: waits behind the large one
	waitWaiting(t, d, 2)
	small.Release()
	c.Release()
	l := <-large
	m := <-mid
	l.Release()
	m.Release()
	if b.HeldBytes() != 0 {
		t.Fatalf("held %d", b.HeldBytes())
	}
}

func TestBudgetAcquireUntil(t *testing.T) {
	b := NewBudget(10)
	d := b.Door("x")
	c, err := d.AcquireUntil(nil, 10)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() { _, err := d.AcquireUntil(done, 1); errc <- err }()
	waitWaiting(t, d, 1)
	close(done)
	if err := <-errc; !errors.Is(err, ErrStopped) {
		t.Fatalf("err %v", err)
	}
	c.Release()
	if b.HeldBytes() != 0 {
		t.Fatalf("held %d", b.HeldBytes())
	}
}

func TestBudgetClaimBytes(t *testing.T) {
	b := NewBudget(10)
	d := b.Door("x")
	if !d.ClaimBytes(10, nil) {
		t.Fatal("refused")
	}
	done := make(chan struct{})
	ok := make(chan bool, 1)
	go func() { ok <- d.ClaimBytes(1, done) }()
	waitWaiting(t, d, 1)
	d.ReleaseBytes(10)
	if !<-ok {
		t.Fatal("not granted once released")
	}
	go func() { ok <- d.ClaimBytes(10, done) }()
	waitWaiting(t, d, 1)
	close(done)
	if <-ok {
		t.Fatal("granted after done closed")
	}
	d.ReleaseBytes(1)
	if b.HeldBytes() != 0 || b.Stats()[0].HeldBytes != 0 {
		t.Fatalf("held %d", b.HeldBytes())
	}
}
