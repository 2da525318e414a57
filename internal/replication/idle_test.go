package replication

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// TestIdleMasterSleepsAndKeepsItsReplica: a SYNC_MASTER whose replica
// holds everything it wrote has nothing to expire or confirm until the
// next write, so its watch sleeps with no timeout; and a replica idle for
// longer than AckTimeout is not taken for a silent one when writes resume
// (its time without progress starts at the write, not at the last round
// before the master slept): here its first acknowledgement after the
// pause is held back 150 ms, within AckTimeout and the idle timeout.
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
	waitUntil(t, "the idle master asleep until the next write", func() bool { return p.m.sleeping.Load() == 0 })

	// A pause longer than AckTimeout, without waiting it out: the
	// replica's last progress is moved back past it.
	p.m.mu.Lock()
	for f := range p.m.replicas {
		f.progress = f.progress.Add(-2 * time.Second)
	}
	p.m.mu.Unlock()

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
	waitUntil(t, "the master asleep again after the writes", func() bool { return p.m.sleeping.Load() == 0 })
}

// TestIdleLeasedMasterSleeps: a Leased master with everything confirmed
// sleeps until its lease's end (not on its 10 ms tick), notices that end
// (it logs it), and then sleeps until the next write.
func TestIdleLeasedMasterSleeps(t *testing.T) {
	st, m := serveLeased(t)
	const lease = 2 * time.Second
	m.SetLease(time.Now().Add(lease))
	if r := st.PutMessage(context.Background(), msg("T", "under the lease")); !r.OK() {
		t.Fatalf("put: %v %v", r.Status, r.Err)
	}
	waitUntil(t, "asleep until the lease's end", func() bool {
		d := time.Duration(m.sleeping.Load())
		return d > 100*time.Millisecond && d <= lease+time.Millisecond
	})
	waitUntil(t, "the end of the lease noticed", func() bool { return m.leaseLost.Load() })
	waitUntil(t, "asleep until the next write", func() bool { return m.sleeping.Load() == 0 })
}
