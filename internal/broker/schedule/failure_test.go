package schedule

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// flakyStore fails every append while failing is set.
type flakyStore struct {
	*store.Store
	failing atomic.Bool
	failed  atomic.Int64
}

func (f *flakyStore) PutMessages(ctx context.Context, ms []*message.Message) store.PutResult {
	if f.failing.Load() {
		f.failed.Add(1)
		return store.PutResult{Status: store.PutServiceNotAvailable, Err: errors.New("injected")}
	}
	return f.Store.PutMessages(ctx, ms)
}

// TestFailedDeliveryRetriedNotSkipped: while appends fail, the cursor stays
// at the due entry; once they succeed it is delivered exactly once.
func TestFailedDeliveryRetriedNotSkipped(t *testing.T) {
	var flaky *flakyStore
	e := &env{t: t, fs: vfs.OS{}, dir: t.TempDir(), clk: newFakeClock(t0), levels: []time.Duration{time.Second}}
	e.wrap = func(st *store.Store) Store { flaky = &flakyStore{Store: st}; return flaky }
	e.start()
	t.Cleanup(e.stop)
	e.schedule(newMsg("f", 0, "one", nil), 1, 0)
	e.schedule(newMsg("f", 0, "two", nil), 1, 0)
	flaky.failing.Store(true)
	e.advance(time.Second)
	e.settle()
	if flaky.failed.Load() == 0 || e.st.MaxOffset("f", 0) != 0 {
		t.Fatalf("failed appends %d, delivered %d", flaky.failed.Load(), e.st.MaxOffset("f", 0))
	}
	if c := e.svc.byKey[qkey{LevelTopic, 0}].cursor; c != 0 {
		t.Fatalf("cursor moved to %d past undelivered entries", c)
	}
	flaky.failing.Store(false)
	e.advance(DefaultRetryInterval)
	e.waitVisible("f", 0, 2)
	e.restart()
	e.advance(time.Hour)
	e.settle()
	if n := e.st.MaxOffset("f", 0); n != 2 {
		t.Fatalf("%d deliveries, want 2", n)
	}
}

// TestCursorBeyondQueueIsPulledBack: a cursor file ahead of its queue (the
// store lost an unflushed tail) must not make the service skip entries
// appended after the restart.
func TestCursorBeyondQueueIsPulledBack(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second})
	e.schedule(newMsg("b", 0, "first", nil), 1, 0)
	e.advance(time.Second)
	e.waitVisible("b", 0, 1)
	e.stop()
	if err := saveCursors(e.fs, e.dir, map[qkey]int64{{LevelTopic, 0}: 50, {TimerTopic, 3}: 7}); err != nil {
		t.Fatal(err)
	}
	e.start()
	if c := e.svc.byKey[qkey{LevelTopic, 0}].cursor; c != 1 {
		t.Fatalf("cursor %d, want the end of the queue (1)", c)
	}
	e.schedule(newMsg("b", 0, "second", nil), 1, 0)
	e.advance(time.Second)
	e.waitVisible("b", 0, 2)
}

// TestTimersAcrossRestarts restarts the service and store repeatedly while
// timers cascade through their queues: each is delivered once, at its due
// time.
func TestTimersAcrossRestarts(t *testing.T) {
	e := newEnv(t, nil)
	dues := map[string]int64{}
	for i, d := range []time.Duration{1500 * time.Millisecond, 9 * time.Second, 77 * time.Second, 33*time.Minute + 5*time.Second, 26 * time.Hour} {
		body := "t" + strconv.Itoa(i)
		at := e.clk.Now().Add(d).UnixMilli()
		e.schedule(newMsg("x", 0, body, nil), 0, at)
		dues[body] = at
	}
	for step := 0; e.st.MaxOffset("x", 0) < int64(len(dues)); step++ {
		if step > 2000 {
			t.Fatal("no progress")
		}
		next, ok := e.clk.NextDeadline()
		if !ok {
			e.settle()
			continue
		}
		e.clk.AdvanceTo(next)
		e.settle()
		if step%3 == 0 {
			e.restart()
		}
	}
	for _, m := range e.delivered("x", 0) {
		due, ok := dues[string(m.Body)]
		if !ok {
			t.Fatalf("%s delivered twice or unknown", m.Body)
		}
		delete(dues, string(m.Body))
		if m.StoreTimestamp != due {
			t.Errorf("%s delivered at %+dms from due", m.Body, m.StoreTimestamp-due)
		}
	}
}

// corruptStore reports the entry at one queue offset as failing
// verification, as the store does for a damaged record.
type corruptStore struct {
	*store.Store
	topic string
	at    int64
}

func (c *corruptStore) GetMessage(topic string, queueID int32, offset int64, maxCount, maxBytes int, f store.Filter) (*store.GetResult, error) {
	if topic == c.topic && offset == c.at {
		return nil, fmt.Errorf("test: record at %d: %w", offset, store.ErrCorrupt)
	}
	if topic == c.topic && offset < c.at {
		maxCount = min(maxCount, int(c.at-offset)) // the batch ends before a damaged record
	}
	return c.Store.GetMessage(topic, queueID, offset, maxCount, maxBytes, f)
}

// TestCorruptEntrySkipped: an entry the store cannot verify is passed (it
// can never be delivered); the entries around it are delivered.
func TestCorruptEntrySkipped(t *testing.T) {
	e := &env{t: t, fs: vfs.OS{}, dir: t.TempDir(), clk: newFakeClock(t0), levels: []time.Duration{time.Second}}
	e.wrap = func(st *store.Store) Store { return &corruptStore{Store: st, topic: LevelTopic, at: 1} }
	e.start()
	t.Cleanup(e.stop)
	for _, b := range []string{"a", "damaged", "c"} {
		e.schedule(newMsg("k", 0, b, nil), 1, 0)
	}
	e.advance(time.Second)
	e.waitVisible("k", 0, 2)
	e.settle()
	var got []string
	for _, m := range e.delivered("k", 0) {
		got = append(got, string(m.Body))
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("delivered %q", got)
	}
}

func TestRunAndCloseLifecycle(t *testing.T) {
	e := newEnv(t, nil)
	e.settle() // the first Run is running
	if err := e.svc.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Run: %v", err)
	}
	e.stop()
	st, err := store.Open(e.storeConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	svc, err := New(Config{Dir: e.dir, Clock: e.clk}, st)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := svc.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := svc.Run(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Run after Close: %v", err)
	}
	// Schedule still stores durably after Close; delivery waits for the next start.
	if r := svc.Schedule(context.Background(), newMsg("z", 0, "late", nil), 1, 0); r.Status != store.PutOK {
		t.Fatalf("Schedule after Close: %v %v", r.Status, r.Err)
	}
	if _, err := New(Config{}, st); err == nil {
		t.Fatal("New without Dir accepted")
	}
	if _, err := New(Config{Dir: e.dir, DelayLevels: []time.Duration{time.Second, 0}}, st); err == nil {
		t.Fatal("zero delay level accepted")
	}
}
