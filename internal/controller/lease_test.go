package controller

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Leases of ASYNC_MASTERs (lease.go): who is granted one, and that no
// election starts before the old master's lease and its margin ended.

func TestLeaseGrantedToTheMasterOnly(t *testing.T) {
	h := newHarness(t)
	b1, b2, b3 := h.groupOfThree()
	for _, b := range []*fakeBroker{b1, b2, b3} {
		b.leaseEpoch = 1
	}
	h.beat()
	if b1.lease != testD/2 {
		t.Fatalf("master's lease %v, want %v (half the detection period)", b1.lease, testD/2)
	}
	if b2.lease != 0 || b3.lease != 0 {
		t.Fatalf("slaves asking for a lease got %v and %v", b2.lease, b3.lease)
	}
	b1.leaseEpoch = 2 // an epoch it is not master at
	h.beat()
	if b1.lease != 0 {
		t.Fatalf("a lease at epoch 2 granted to the master of epoch 1: %v", b1.lease)
	}
	// Cut from the controllers, the master's lease is not renewed; the
	// group elects after the detection period (the lease ended before).
	b1.leaseEpoch = 1
	b1.mu.Lock()
	b1.cut = true
	b1.mu.Unlock()
	g := h.waitEpoch(2)
	b1.mu.Lock()
	b1.cut = false
	b1.mu.Unlock()
	h.beat()
	if b1.lease != 0 {
		t.Fatalf("the replaced master was granted a lease at its old epoch: %v", b1.lease)
	}
	next := h.fakes[0]
	for _, b := range h.fakes {
		if b.id == g.MasterID {
			next = b
		}
	}
	next.leaseEpoch = 2
	h.beat()
	if next.lease != testD/2 {
		t.Fatalf("the new master (replica %d) got lease %v", next.id, next.lease)
	}
}

// A master whose process restarted is replaced at once under
// SYNC_MASTER (fencing is enough); with a lease, not before the lease
// the old process held has ended, plus its margin.
func TestLeaseElectionWaitsForTheLease(t *testing.T) {
	h := newHarness(t)
	b1, _, _ := h.groupOfThree()
	b1.leaseEpoch = 1
	h.beat()
	granted := h.clock.Now()
	lease := b1.lease
	if lease != testD/2 {
		t.Fatalf("lease %v", lease)
	}
	end := granted.Add(lease + LeaseMargin(lease))
	st, err := h.nodes[h.leader()].Status()
	if err != nil {
		t.Fatal(err)
	}
	if got := st.LeaseEnds["broker-a"]; got != end.UnixMilli() {
		t.Fatalf("status lease end %d, want %d", got, end.UnixMilli())
	}
	// The master restarts: a new incarnation, which never keeps the role.
	b1.leaseEpoch = 0
	h.register(b1)
	h.settle()
	for h.clock.Now().Add(time.Second).Before(end) {
		h.clock.Advance(time.Second)
		h.beat()
		h.settle()
		if g := h.group(); g.MasterEpoch != 1 {
			t.Fatalf("elected at %v, %v after the lease was granted, before the lease (%v) and its margin ended: %+v",
				h.clock.Now(), h.clock.Now().Sub(granted), lease, g.History[len(g.History)-1])
		}
	}
	g := h.waitEpoch(2)
	ev := g.History[len(g.History)-1]
	if ev.TimeMillis < end.UnixMilli() {
		t.Fatalf("election at %d, before the lease end %d", ev.TimeMillis, end.UnixMilli())
	}
}

func TestLeaseLongerThanDetectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := Config{Addr: ln.Addr().String(), Listener: ln, DataDir: t.TempDir(), DetectionPeriod: 6 * time.Second, LeaseDuration: 5600 * time.Millisecond}
	if err := cfg.withDefaults(); err == nil || !strings.Contains(err.Error(), "detection period") {
		t.Fatalf("a lease of 5.6 s (margin 0.56 s) under a 6 s detection period: %v", err)
	}
	cfg.LeaseDuration = 5 * time.Second
	if err := cfg.withDefaults(); err != nil {
		t.Fatal(err)
	}
}

// The agent asks for a lease while it names an epoch, and measures the
// grant from before the heartbeat left.
func TestAgentLease(t *testing.T) {
	h := newHarness(t, func(h *harness) { h.realBrokers = true })
	h.leader()
	type grant struct {
		epoch       uint32
		until, seen time.Time
		sent        time.Time
	}
	var mu sync.Mutex
	var grants []grant
	var ask uint32
	var before time.Time // set just before asking
	a := startAgent(t, h, t.TempDir(), 0, 100, func(c *AgentConfig) {
		c.Lease = func() uint32 {
			mu.Lock()
			defer mu.Unlock()
			before = time.Now()
			return ask
		}
		c.OnLease = func(e uint32, until time.Time) {
			mu.Lock()
			grants = append(grants, grant{epoch: e, until: until, seen: time.Now(), sent: before})
			mu.Unlock()
		}
	})
	advanceUntil(h, "the first election", []*testAgent{a}, func() bool { g := h.group(); return g != nil && g.MasterEpoch == 1 })
	mu.Lock()
	if len(grants) != 0 {
		t.Fatalf("granted without asking: %+v", grants)
	}
	ask = 1
	mu.Unlock()
	h.waitFor("a lease", func() bool { mu.Lock(); defer mu.Unlock(); return len(grants) > 0 })
	mu.Lock()
	g := grants[0]
	mu.Unlock()
	lease := testD / 2
	// The heartbeat left between the Lease call and the grant's arrival:
	// the lease ends between those two plus its duration.
	if g.epoch != 1 || g.until.Before(g.sent.Add(lease)) || g.until.After(g.seen.Add(lease)) {
		t.Fatalf("grant %+v: want epoch 1, ending %v after the heartbeat was sent", g, lease)
	}
}

// TestLeaseNotGrantedWhileElecting: a master whose heartbeats stopped for
// the detection period is being replaced; a heartbeat of it arriving
// while the election runs (its fences are slow) gets no lease, so the
// election never overlaps a lease it did not wait for.
func TestLeaseNotGrantedWhileElecting(t *testing.T) {
	h := newHarness(t)
	b1, b2, _ := h.groupOfThree()
	b1.leaseEpoch = 1
	h.beat()
	if b1.lease == 0 {
		t.Fatal("no lease before the test")
	}
	wait := make(chan struct{})
	b2.mu.Lock()
	b2.fenceWait = wait
	b2.mu.Unlock()
	b1.mu.Lock()
	b1.cut = true
	b1.mu.Unlock()
	l := h.nodes[h.leader()]
	electing := func() bool {
		l.lead.mu.Lock()
		defer l.lead.mu.Unlock()
		return l.lead.electing["broker-a"]
	}
	deadline := time.Now().Add(20 * time.Second)
	for !electing() {
		if time.Now().After(deadline) {
			t.Fatal("no election started")
		}
		h.clock.Advance(time.Second)
		h.beat()
		time.Sleep(20 * time.Millisecond) // real time for the leader's scans (every 5 ms)
	}
	b1.mu.Lock()
	b1.cut = false
	b1.mu.Unlock()
	h.beat() // the old master's late heartbeat, during the election
	stillElecting := electing()
	close(wait)
	if !stillElecting {
		t.Skip("the election ended before the late heartbeat (a slow machine); nothing was checked")
	}
	if b1.lease != 0 {
		t.Fatalf("a lease of %v granted during an election of the group", b1.lease)
	}
}
