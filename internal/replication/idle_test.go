package replication

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestIdleMasterSleepsAndKeepsItsReplica: a SYNC_MASTER whose replica
// holds everything it wrote has nothing to expire or confirm until the
// next write, so its watch does not wake on a tick; and a replica that was
// idle longer than AckTimeout is not taken for a silent one when writes
// resume (its time without progress starts at the write, not at the last
// round before the master slept): here its first acknowledgement after
// the pause is held back 150 ms, within AckTimeout and the idle timeout.
func TestIdleMasterSleepsAndKeepsItsReplica(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 2) // AckTimeout 1 s, heartbeats every 50 ms
	defer p.stopMaster()
	proxy := newLinkProxy(t, p.addr)
	master := p.addr
	p.addr = proxy.addr()
	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	p.addr = master
	waitUntil(t, "slave in sync", func() bool { return p.m.InSync() == 2 })
	if r := p.master.PutMessage(context.Background(), msg("T", "first")); !r.OK() {
		t.Fatalf("put: %v %v", r.Status, r.Err)
	}

	// Idle for longer than AckTimeout: a watch on its 50 ms tick would
	// run about 30 rounds.
	start := p.m.rounds.Load()
	time.Sleep(1500 * time.Millisecond)
	if n := p.m.rounds.Load() - start; n > 3 {
		t.Fatalf("an idle master's watch ran %d rounds in 1.5 s", n)
	}
	if n := p.m.InSync(); n != 2 {
		t.Fatalf("idle: %d copies in sync, want 2", n)
	}

	// The first put after the pause waits 150 ms for its acknowledgement;
	// meanwhile the replica must stay in the in-sync set (looked at every
	// millisecond: an ack rejoins it, so after the put is too late).
	proxy.cutAcks.Store(true)
	time.AfterFunc(150*time.Millisecond, func() { proxy.cutAcks.Store(false) })
	done := make(chan error, 1)
	go func() {
		r := p.master.PutMessage(context.Background(), msg("T", "after the pause"))
		if !r.OK() {
			done <- fmt.Errorf("put after the pause: %v %v", r.Status, r.Err)
		}
		close(done)
	}()
	for waiting := true; waiting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			waiting = false
		case <-time.After(time.Millisecond):
		}
		if n := p.m.InSync(); n != 2 {
			t.Fatalf("the replica, idle for longer than AckTimeout, left the in-sync set on the first write after it (%d copies in sync)", n)
		}
	}
	for i := range 20 {
		if r := p.master.PutMessage(context.Background(), msg("T", "then")); !r.OK() {
			t.Fatalf("put %d: %v %v", i, r.Status, r.Err)
		}
	}
	if n := p.m.rounds.Load() - start; n < 1 {
		t.Fatalf("the watch did not run for the writes after the pause (%d rounds)", n)
	}
}

// TestIdleLeasedMasterSleeps: a Leased master with everything confirmed
// sleeps until the next write or its lease's end, and still notices that
// end (it logs it) while idle.
func TestIdleLeasedMasterSleeps(t *testing.T) {
	st, m := serveLeased(t)
	m.SetLease(time.Now().Add(400 * time.Millisecond))
	if r := st.PutMessage(context.Background(), msg("T", "under the lease")); !r.OK() {
		t.Fatalf("put: %v %v", r.Status, r.Err)
	}
	waitUntil(t, "the put confirmed", func() bool { return st.Offset(store.Replicated) >= st.Offset(store.Written) })
	start := m.rounds.Load()
	waitUntil(t, "the end of the lease noticed", func() bool { return m.leaseLost.Load() })
	time.Sleep(300 * time.Millisecond)
	// On a 10 ms tick: about 70 rounds.
	if n := m.rounds.Load() - start; n > 4 {
		t.Fatalf("an idle leased master's watch ran %d rounds in about 700 ms", n)
	}
}
