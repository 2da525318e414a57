package transaction

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// acker stands for a SYNC_MASTER's in-sync replicas: while on, it
// confirms everything the store wrote.
func (e *env) acker(t *testing.T) (on *atomic.Bool) {
	on = new(atomic.Bool)
	on.Store(true)
	stop := make(chan struct{})
	done := make(chan struct{})
	st := e.st
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if on.Load() {
				st.AdvanceReplicated(st.Offset(store.Written))
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return on
}

// TestCheckReputAnsweredSlaveTimeout: the check round's re-put of a half
// answers FLUSH_SLAVE_TIMEOUT (the replicas acknowledge late). The copy is
// in the log: it is registered and the check is sent, not retried with a
// second copy next round.
func TestCheckReputAnsweredSlaveTimeout(t *testing.T) {
	e := &env{t: t, dir: t.TempDir(), clk: newFakeClock(), prods: newProducers(t), replicated: true}
	e.fs = vfs.OS{}
	e.open()
	t.Cleanup(e.close)
	acks := e.acker(t)
	ck := e.prods.connect(t, "pg")
	m := e.prepare("Orders", "pg", "late")
	acks.Store(false)
	e.clk.Advance(6 * time.Second)
	if rr := e.eng.CheckOnce(context.Background()); rr.Checked != 1 {
		t.Fatalf("round with late replicas %+v, want one check", rr)
	}
	chk := ck.next(t)
	if chk.Half.PhysOffset == m.PhysOffset {
		t.Fatalf("check carries the old half")
	}
	acks.Store(true)
	if err := e.st.WaitFor(context.Background(), store.Replicated, e.st.Offset(store.Written), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if c := e.endAt("pg", chk.Half.QueueOffset, chk.Half.PhysOffset, decisionCommit); c != 0 {
		t.Fatalf("commit from check: %d", c)
	}
	if got := e.records("Orders", 0); len(got) != 1 {
		t.Fatalf("delivered %d, want 1", len(got))
	}
	if got := e.records(HalfTopic, 0); len(got) != 2 {
		t.Fatalf("half queue holds %d records, want the half and one copy", len(got))
	}
}
