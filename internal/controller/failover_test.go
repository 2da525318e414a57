package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// One scripted test per failure case. Each asserts the epochs, the
// in-sync sets and who was fenced at which epoch.

func TestFailoverMasterCrash(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	// Replica 4 is outside the in-sync set with the longest log: an
	// unclean candidate, never elected while unclean elections are off.
	b4 := h.addBroker("s4", 1, 5000)
	b2.setLog(1, 900)
	b3.setLog(1, 950)

	b1.mu.Lock()
	b1.down = true
	b1.mu.Unlock()
	// Silent for less than the detection period: no election.
	h.expectNoElection(1, testD-time.Second)
	g := h.waitEpoch(2)

	if g.MasterID != b3.id {
		t.Fatalf("elected %d, want %d (longest in-sync log)", g.MasterID, b3.id)
	}
	if got, want := isrIDs(g), []ReplicaID{b2.id, b3.id}; !slices.Equal(got, want) {
		t.Fatalf("in-sync %v, want %v", got, want)
	}
	if g.InSyncEpoch != 3 {
		t.Fatalf("in-sync epoch %d, want 3", g.InSyncEpoch)
	}
	ev := g.History[len(g.History)-1]
	if ev.Kind != EventElect || ev.Epoch != 2 || ev.OldMasterID != b1.id ||
		fmt.Sprint(ev.Fenced) != fmt.Sprint([]Fenced{{b2.id, 1, 900}, {b3.id, 1, 950}}) {
		t.Fatalf("history entry %+v", ev)
	}
	for _, b := range []*fakeBroker{b2, b3} {
		if b.fencedEpoch != 2 {
			t.Errorf("replica %d fenced at %d, want 2", b.id, b.fencedEpoch)
		}
	}
	if len(b4.fences) != 0 || len(b1.fences) != 0 {
		t.Errorf("fenced outside the candidates: replica 4 %v, old master %v", b4.fences, b1.fences)
	}
	h.waitFor("the new master notified", func() bool {
		b3.mu.Lock()
		defer b3.mu.Unlock()
		return b3.view.MasterEpoch == 2 && b3.view.MasterID == b3.id && b3.notified > 0
	})
	// The old master comes back as a new process: it learns the newer
	// epoch and that it is not the master.
	h.register(b1)
	if b1.view.MasterEpoch != 2 || b1.view.MasterID != b3.id || b1.view.MasterAddr != b3.addr {
		t.Fatalf("returning master's view %+v", b1.view)
	}
}

func TestFailoverMasterCutFromControllers(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	b2.setLog(1, 1200)
	b1.mu.Lock()
	b1.cut = true // runs, serves its slaves, but reaches no controller
	b1.mu.Unlock()
	g := h.waitEpoch(2)
	if g.MasterID != b2.id || !slices.Equal(isrIDs(g), []ReplicaID{b2.id, b3.id}) {
		t.Fatalf("after the cut: %+v", g)
	}
	// Both slaves promised epoch 2, so neither follows or acknowledges the
	// old master any more: it cannot acknowledge a write from now on.
	if b2.fencedEpoch != 2 || b3.fencedEpoch != 2 || len(b1.fences) != 0 {
		t.Fatalf("fences: b1 %v b2 %d b3 %d", b1.fences, b2.fencedEpoch, b3.fencedEpoch)
	}
	// Healed: the old master's in-sync change at its old epoch is refused
	// (over the wire), and its next heartbeat tells it the new master.
	b1.mu.Lock()
	b1.cut = false
	b1.mu.Unlock()
	_, err := h.alter(b1, b1)
	var re *RemoteError
	if !errors.Is(err, ErrNotMaster) || !errors.As(err, &re) {
		t.Fatalf("stale master's AlterInSync: %v, want a remote ErrNotMaster", err)
	}
	h.beat()
	if b1.view.MasterEpoch != 2 || b1.view.MasterID != b2.id {
		t.Fatalf("old master's view after healing: %+v", b1.view)
	}
	if g := h.group(); g.MasterEpoch != 2 || g.InSyncEpoch != 3 {
		t.Fatalf("the stale AlterInSync changed the group: %+v", g)
	}
}

func TestFailoverSlaveCrash(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	b2.mu.Lock()
	b2.down = true
	b2.mu.Unlock()
	// The master lives: no election however long the slave is gone.
	h.expectNoElection(1, 3*testD)
	// The master shrinks the in-sync set.
	if _, err := h.alter(b1, b1, b3); err != nil {
		t.Fatal(err)
	}
	g := h.group()
	if !slices.Equal(isrIDs(g), []ReplicaID{b1.id, b3.id}) || g.InSyncEpoch != 3 || g.MasterEpoch != 1 {
		t.Fatalf("after the shrink: %+v", g)
	}
	if len(b2.fences)+len(b3.fences) != 0 {
		t.Fatal("a slave crash fenced someone")
	}
	// The slave restarts (new incarnation): adding it back at its old
	// incarnation is refused, at the new one accepted.
	oldInc := b2.incarnation
	h.register(b2)
	b2.mu.Lock()
	newInc := b2.incarnation
	b2.incarnation = oldInc
	b2.mu.Unlock()
	if _, err := h.alter(b1, b1, b2, b3); !errors.Is(err, ErrStaleIncarnation) {
		t.Fatalf("adding a stale incarnation: %v", err)
	}
	b2.mu.Lock()
	b2.incarnation = newInc
	b2.mu.Unlock()
	if _, err := h.alter(b1, b1, b2, b3); err != nil {
		t.Fatal(err)
	}
	if g := h.group(); len(g.InSync) != 3 || g.InSyncEpoch != 4 {
		t.Fatalf("after the expand: %+v", g)
	}
}

func TestFailoverControllerLeaderCrash(t *testing.T) {
	h := newHarness(t)
	b1, _, _ := h.groupOfThree()
	old := h.leader()
	h.stop(old)
	next := h.leader()
	if next == old {
		t.Fatal("no new leader")
	}
	// The new leader holds no heartbeat yet. The slaves find it at once,
	// the master only after almost a detection period: the new leader
	// must not take that silence for a dead master.
	b1.mu.Lock()
	b1.cut = true
	b1.mu.Unlock()
	h.run(testD - 2*time.Second) // its next heartbeat comes within D of the takeover
	if g := h.group(); g.MasterEpoch != 1 {
		t.Fatalf("spurious election by the new leader: %+v", g.History)
	}
	b1.mu.Lock()
	b1.cut = false
	b1.mu.Unlock()
	h.expectNoElection(1, 2*testD)
	// The old leader returns as a follower and catches up.
	h.start(old, nil, nil)
	h.waitFor("the old leader to catch up", func() bool {
		return h.nodes[old].FSM().State().Index >= h.nodes[next].FSM().State().Index && h.nodes[old].FSM().Group("broker-a") != nil
	})
}

func TestFailoverControllerLeaderAndMasterTogether(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	b2.setLog(1, 1100)
	b3.setLog(1, 1050)
	old := h.leader()
	h.stop(old)
	b1.mu.Lock()
	b1.down = true
	b1.mu.Unlock()
	next := h.leader()
	h.expectNoElection(1, testD-time.Second)
	g := h.waitEpoch(2)
	if g.MasterID != b2.id || !slices.Equal(isrIDs(g), []ReplicaID{b2.id, b3.id}) {
		t.Fatalf("after the double crash: %+v", g)
	}
	// The restarted master does not make itself master: it registers, and
	// the view says replica 2 at epoch 2.
	h.register(b1)
	if b1.view.MasterID != b2.id || b1.view.MasterEpoch != 2 {
		t.Fatalf("restarted master's view %+v", b1.view)
	}
	h.start(old, nil, nil)
	h.waitFor("the old leader to learn epoch 2", func() bool {
		g := h.nodes[old].FSM().Group("broker-a")
		return g != nil && g.MasterEpoch == 2
	})
	_ = next
}

func TestFailoverDouble(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	b3.setLog(1, 1500)
	b1.mu.Lock()
	b1.down = true
	b1.mu.Unlock()
	g := h.waitEpoch(2)
	if g.MasterID != b3.id {
		t.Fatalf("first failover elected %d", g.MasterID)
	}
	// Replica 2 follows the new master into epoch 2; then that one dies.
	b2.setLog(2, 1700)
	b3.setLog(2, 1800)
	b3.mu.Lock()
	b3.down = true
	b3.mu.Unlock()
	h.expectNoElection(2, testD-time.Second)
	g = h.waitEpoch(3)
	if g.MasterID != b2.id || !slices.Equal(isrIDs(g), []ReplicaID{b2.id}) || g.InSyncEpoch != 4 {
		t.Fatalf("second failover: %+v", g)
	}
	if !slices.Equal(b2.fences, []uint32{2, 3}) {
		t.Fatalf("replica 2 fences %v, want [2 3]", b2.fences)
	}
	if n := len(g.History); n != 3 || g.History[1].Epoch != 2 || g.History[2].Epoch != 3 {
		t.Fatalf("history %+v", g.History)
	}
	// With no live in-sync replica left, nothing is elected: replica 1
	// returns, but it is out of the in-sync set and unclean elections are
	// off.
	b2.mu.Lock()
	b2.down = true
	b2.mu.Unlock()
	h.register(b1)
	h.expectNoElection(3, 2*testD)
	st, err := h.nodes[h.leader()].Status()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.WithoutMaster["broker-a"]; !ok {
		t.Fatalf("status does not show the group without a master: %+v", st)
	}
	// The operator allows an unclean election for this group (audited):
	// replica 1 is elected.
	if _, err := b1.client.SetAllowUnclean(ctxT(t), AllowUnclean{Group: "broker-a", Allow: true, Note: "accept the loss"}); err != nil {
		t.Fatal(err)
	}
	g = h.waitEpoch(4)
	last := g.History[len(g.History)-1]
	if g.MasterID != b1.id || last.Kind != EventUnclean || g.History[len(g.History)-2].Kind != EventAllowUnclean {
		t.Fatalf("unclean election: %+v", g)
	}
}

// switchOver runs a switch-over through the RPC while the brokers keep
// heartbeating (the leader waits for the target's heartbeats).
func (h *harness) switchOver(to *fakeBroker, during func()) (GroupView, error) {
	type result struct {
		v   GroupView
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := to.client.SwitchOver(ctxT(h.t), SwitchOverRequest{Group: "broker-a", To: to.id, Note: "maintenance"})
		done <- result{v, err}
	}()
	for {
		select {
		case r := <-done:
			return r.v, r.err
		case <-time.After(20 * time.Millisecond):
			if during != nil {
				during()
			}
			h.beat()
		}
	}
}

func TestSwitchOver(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	b1.setLog(1, 2000) // the master is ahead; replica 2 catches up once the master is fenced
	b2.setLog(1, 1900)
	v, err := h.switchOver(b2, func() {
		b1.mu.Lock()
		fenced := b1.fencedEpoch == 2
		b1.mu.Unlock()
		if fenced {
			b2.setLog(1, 2000)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if v.MasterID != b2.id || v.MasterEpoch != 2 {
		t.Fatalf("view after the switch-over %+v", v)
	}
	g := h.group()
	if !slices.Equal(isrIDs(g), []ReplicaID{b1.id, b2.id, b3.id}) {
		t.Fatalf("in-sync after a switch-over %v: the old master holds the whole log and stays", isrIDs(g))
	}
	ev := g.History[len(g.History)-1]
	if ev.Kind != EventSwitchOver || ev.Note != "maintenance" || fmt.Sprint(ev.Fenced) != fmt.Sprint([]Fenced{{b1.id, 1, 2000}, {b2.id, 1, 2000}}) {
		t.Fatalf("history %+v", ev)
	}
	if !slices.Equal(b1.fences, []uint32{2}) || !slices.Equal(b2.fences, []uint32{2}) || len(b3.fences) != 0 {
		t.Fatalf("fences b1 %v b2 %v b3 %v", b1.fences, b2.fences, b3.fences)
	}
	h.expectNoElection(2, 2*testD)

	// Refused: to a replica outside the in-sync set, to the master.
	if _, err := h.alter(b2, b2, b1); err != nil {
		t.Fatal(err)
	}
	if _, err := b3.client.SwitchOver(ctxT(t), SwitchOverRequest{Group: "broker-a", To: b3.id}); !errors.Is(err, ErrNotInSync) {
		t.Fatalf("switch-over to a replica outside the in-sync set: %v", err)
	}
	if _, err := b3.client.SwitchOver(ctxT(t), SwitchOverRequest{Group: "broker-a", To: b2.id}); !errors.Is(err, ErrInvalidCommand) {
		t.Fatalf("switch-over to the master: %v", err)
	}
}

func TestSwitchOverAbortedWhenTheTargetLags(t *testing.T) {
	h := newHarness(t)
	b1, b2, _ := h.groupOfThree()
	b1.setLog(1, 5000)
	b2.setLog(1, 100) // never catches up
	_, err := h.switchOver(b2, nil)
	if !errors.Is(err, ErrSwitchOverAborted) {
		t.Fatalf("switch-over to a lagging replica: %v", err)
	}
	// The master is elected again at epoch 2: by the abort, or, if raft
	// lost its leader meanwhile and the abort's re-election did not
	// commit, by the automatic election its fenced heartbeat starts (the
	// error then says the re-election was not confirmed; it may also have
	// committed, raft could not say).
	g := h.waitEpoch(2)
	last := g.History[len(g.History)-1]
	if g.MasterID != b1.id || len(g.InSync) != 3 {
		t.Fatalf("after the aborted switch-over: %+v", g)
	}
	unconfirmed := strings.Contains(err.Error(), "re-electing the master was not confirmed")
	switch {
	case last.Kind == EventSwitchOver && strings.HasPrefix(last.Note, "aborted: "):
		if len(b2.fences) != 0 {
			t.Fatalf("the lagging target was fenced: %v", b2.fences)
		}
		if unconfirmed {
			t.Logf("the abort's re-election committed although raft did not confirm it (%v)", err)
		}
	case last.Kind == EventElect && unconfirmed:
		t.Logf("the abort's re-election did not commit (%v); the automatic election replaced the fenced master", err)
	default:
		t.Fatalf("history after the abort: %+v (the switch-over answered %v)", last, err)
	}
	// The master, fenced at 2 and elected at 2, is alive: no election.
	h.expectNoElection(2, 2*testD)
}

// TestFencedMasterWithoutElectionIsReplaced: a master that promised a
// higher epoch (a fence whose election never committed) takes no writes;
// its heartbeat says so and the leader elects.
func TestFencedMasterWithoutElectionIsReplaced(t *testing.T) {
	h := newHarness(t)
	b1, _, _ := h.groupOfThree()
	b1.mu.Lock()
	b1.fencedEpoch = 2
	b1.mu.Unlock()
	g := h.waitEpoch(2)
	if g.History[len(g.History)-1].Kind != EventElect {
		t.Fatalf("history %+v", g.History)
	}
}

// TestRestartedMasterElectedAtANewEpoch: a master that restarts (a new
// incarnation) never keeps its role by itself; holding the longest log,
// it is elected again, at the next epoch, after a fence.
func TestRestartedMasterElectedAtANewEpoch(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	b1.setLog(1, 2000)
	h.register(b1) // the process restarted
	g := h.waitEpoch(2)
	if g.MasterID != b1.id || !slices.Equal(isrIDs(g), []ReplicaID{b1.id, b2.id, b3.id}) {
		t.Fatalf("after the master's restart: %+v", g)
	}
	if !slices.Equal(b1.fences, []uint32{2}) {
		t.Fatalf("restarted master fences %v, want [2]", b1.fences)
	}
	// The in-sync set names it at its new incarnation.
	for _, m := range g.InSync {
		if m.ID == b1.id && m.Incarnation != b1.incarnation {
			t.Fatalf("in-sync entry %+v, incarnation %d", m, b1.incarnation)
		}
	}
}

// TestUncleanElectionByConfig: with enableElectUncleanMaster, a replica
// outside the in-sync set is elected when no member answers; without it,
// nothing is.
func TestUncleanElectionByConfig(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	if _, err := h.alter(b1, b1); err != nil { // the slaves fell behind
		t.Fatal(err)
	}
	b2.setLog(1, 700)
	b3.setLog(1, 800)
	b1.mu.Lock()
	b1.down = true
	b1.mu.Unlock()
	h.expectNoElection(1, 2*testD)
	// Restart every voter with unclean elections allowed.
	h.allowUnclean = true
	for i := range h.nodes {
		h.stop(i)
		h.start(i, nil, nil)
	}
	g := h.waitEpoch(2)
	last := g.History[len(g.History)-1]
	if g.MasterID != b3.id || last.Kind != EventUnclean || !slices.Equal(isrIDs(g), []ReplicaID{b3.id}) {
		t.Fatalf("unclean election by config: %+v", g)
	}
}

// A slave that promised an epoch above the master's (the fence of an
// election whose leader lost leadership before committing it) refuses the
// master for good: the leader elects again, at that epoch, and the slave
// is back in a group it follows.
func TestSlaveFencedAboveTheMasterEpochIsResolved(t *testing.T) {
	h := newHarness(t)
	b1, _, b3 := h.groupOfThree()
	g := h.group()
	if g.MasterID != b1.id || g.MasterEpoch != 1 {
		t.Fatalf("group %+v", g)
	}
	b3.mu.Lock()
	b3.fencedEpoch = 2 // promised to an election never committed
	b3.mu.Unlock()
	g = h.waitEpoch(2)
	if g.MasterID == 0 || !g.inSync(g.MasterID) {
		t.Fatalf("after the promise above the epoch: %+v", g)
	}
}
