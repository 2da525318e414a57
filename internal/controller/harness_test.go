package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"testing"
	"time"
)

// The in-process harness: three controller nodes on loopback TCP (ports
// chosen at run time), a manual clock driving every liveness decision,
// and fake brokers that register and heartbeat over remoting and answer
// fences in-process.

type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func newManualClock() *manualClock {
	return &manualClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// fakeBroker is one replica: its log (last epoch, end), the epoch it
// promised, and whether it runs and reaches the controllers.
type fakeBroker struct {
	store string
	addr  string

	mu          sync.Mutex
	id          ReplicaID
	incarnation uint64
	lastEpoch   uint32
	logEnd      int64
	fencedEpoch uint32
	down        bool // crashed: no heartbeat, no fence answer
	cut         bool // alive, but no link to the controllers
	fences      []uint32
	view        GroupView // the newest view it learned
	notified    int
	client      *Client
	// leaseEpoch is the epoch its heartbeats ask a lease at (0: none);
	// lease the last grant (0: none) and leaseAt the clock time of the
	// heartbeat that got it.
	leaseEpoch uint32
	lease      time.Duration
	leaseAt    time.Time
	// fenceWait, if set, holds its fence answers until closed (or the
	// fence's context ends).
	fenceWait chan struct{}
}

func (b *fakeBroker) setLog(epoch uint32, end int64) {
	b.mu.Lock()
	b.lastEpoch, b.logEnd = epoch, end
	b.mu.Unlock()
}

func (b *fakeBroker) reachable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.down && !b.cut
}

func (b *fakeBroker) learn(v GroupView) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v.MasterEpoch >= b.view.MasterEpoch {
		b.view = v
	}
}

// fakeBrokers implements Brokers by address.
type fakeBrokers struct {
	mu sync.Mutex
	by map[string]*fakeBroker
}

func (fb *fakeBrokers) get(addr string) (*fakeBroker, error) {
	fb.mu.Lock()
	b := fb.by[addr]
	fb.mu.Unlock()
	if b == nil || !b.reachable() {
		return nil, fmt.Errorf("dial %s: connection refused", addr)
	}
	return b, nil
}

func (fb *fakeBrokers) Fence(ctx context.Context, r Replica, req FenceRequest) (FenceResponse, error) {
	b, err := fb.get(r.Addr)
	if err != nil {
		return FenceResponse{}, err
	}
	b.mu.Lock()
	wait := b.fenceWait
	b.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
			return FenceResponse{}, ctx.Err()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if req.Epoch < b.fencedEpoch {
		return FenceResponse{}, fmt.Errorf("%w: promised %d", ErrFenced, b.fencedEpoch)
	}
	b.fencedEpoch = req.Epoch
	b.fences = append(b.fences, req.Epoch)
	return FenceResponse{ReplicaID: b.id, Incarnation: b.incarnation, FencedEpoch: b.fencedEpoch, LastEpoch: b.lastEpoch, LogEnd: b.logEnd}, nil
}

func (fb *fakeBrokers) RoleChanged(_ context.Context, r Replica, v GroupView) error {
	b, err := fb.get(r.Addr)
	if err != nil {
		return err
	}
	b.learn(v)
	b.mu.Lock()
	b.notified++
	b.mu.Unlock()
	return nil
}

type harness struct {
	t       *testing.T
	clock   *manualClock
	brokers *fakeBrokers
	addrs   []string
	dirs    []string
	nodes   []*Controller // nil: stopped
	cancels []context.CancelFunc
	runDone []chan struct{}
	fakes   []*fakeBroker
	nextInc uint64
	// allowUnclean is Config.AllowUnclean of nodes started from now on.
	allowUnclean bool
	// realBrokers: the nodes reach brokers over remoting (RemotingBrokers)
	// instead of the fakes.
	realBrokers bool
}

const testD = 6 * time.Second

func newHarness(t *testing.T, opts ...func(*harness)) *harness {
	t.Helper()
	h := &harness{t: t, clock: newManualClock(), brokers: &fakeBrokers{by: map[string]*fakeBroker{}}, nextInc: 100}
	for _, o := range opts {
		o(h)
	}
	lns := make([]net.Listener, 3)
	var voters []Voter
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i] = ln
		h.addrs = append(h.addrs, ln.Addr().String())
		h.dirs = append(h.dirs, t.TempDir())
		voters = append(voters, Voter{ID: fmt.Sprintf("n%d", i), Addr: ln.Addr().String()})
	}
	h.nodes = make([]*Controller, 3)
	h.cancels = make([]context.CancelFunc, 3)
	h.runDone = make([]chan struct{}, 3)
	for i, ln := range lns {
		var boot []Voter
		if i == 0 {
			boot = voters
		}
		h.start(i, ln, boot)
	}
	t.Cleanup(func() {
		for _, b := range h.fakes {
			b.client.Close()
		}
		for i := range h.nodes {
			h.stop(i)
		}
	})
	return h
}

func (h *harness) config(i int, ln net.Listener, boot []Voter) Config {
	level := slog.LevelError
	if os.Getenv("KEEL_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	return Config{
		NodeID: fmt.Sprintf("n%d", i), Addr: h.addrs[i], Listener: ln, DataDir: h.dirs[i], Bootstrap: boot,
		DetectionPeriod: testD, ScanInterval: 5 * time.Millisecond, FenceTimeout: time.Second, NotifyRoleChange: true,
		// Short raft timeouts keep the tests quick; not so short that a
		// loaded machine (the race detector, parallel packages) makes the
		// leadership flap.
		HeartbeatTimeout: 400 * time.Millisecond, ElectionTimeout: 400 * time.Millisecond, LeaderLeaseTimeout: 200 * time.Millisecond,
		Clock: h.clock, Brokers: h.brokersFor(), AllowUnclean: h.allowUnclean,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("node", i),
	}
}

func (h *harness) start(i int, ln net.Listener, boot []Voter) {
	h.t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", h.addrs[i]); err != nil {
			h.t.Fatal(err)
		}
	}
	c, err := Open(h.config(i, ln, boot))
	if err != nil {
		h.t.Fatalf("open node %d: %v", i, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	h.nodes[i], h.cancels[i], h.runDone[i] = c, cancel, done
}

func (h *harness) stop(i int) {
	if h.nodes[i] == nil {
		return
	}
	h.cancels[i]()
	<-h.runDone[i]
	if err := h.nodes[i].Close(); err != nil {
		h.t.Logf("close node %d: %v", i, err)
	}
	h.nodes[i] = nil
}

// waitFor polls cond (real time) until it holds or 20 s pass.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// leader waits for an acting leader and returns its index.
func (h *harness) leader() int {
	h.t.Helper()
	idx := -1
	h.waitFor("an acting leader", func() bool {
		for i, n := range h.nodes {
			if n != nil && n.Acting() {
				idx = i
				return true
			}
		}
		return false
	})
	return idx
}

// settle waits until the acting leader has scanned the groups twice at
// the current clock time, and no election is running: then nothing more
// happens until the clock moves.
func (h *harness) settle() {
	h.t.Helper()
	l := h.nodes[h.leader()]
	start := l.lead.scans.Load()
	h.waitFor("two scans and no election running", func() bool {
		l.lead.mu.Lock()
		running := len(l.lead.electing)
		l.lead.mu.Unlock()
		return l.lead.scans.Load() >= start+2 && running == 0
	})
}

func (h *harness) group() *Group {
	h.t.Helper()
	return h.nodes[h.leader()].FSM().Group("broker-a")
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// addBroker registers a fake replica of broker-a.
func (h *harness) addBroker(store string, lastEpoch uint32, logEnd int64) *fakeBroker {
	h.t.Helper()
	b := &fakeBroker{store: store, addr: "broker-" + store + ":10911", client: NewClient(h.addrs), lastEpoch: lastEpoch, logEnd: logEnd}
	h.brokers.mu.Lock()
	h.brokers.by[b.addr] = b
	h.brokers.mu.Unlock()
	h.fakes = append(h.fakes, b)
	h.register(b)
	return b
}

// register is a broker process start: a new incarnation.
func (h *harness) register(b *fakeBroker) {
	h.t.Helper()
	h.nextInc++
	b.mu.Lock()
	b.incarnation, b.down = h.nextInc, false
	req := RegisterRequest{ClusterID: b.view.ClusterID, Group: "broker-a", StoreUUID: b.store, ReplicaID: b.id,
		Addr: b.addr, HAAddr: b.addr + "-ha", Incarnation: b.incarnation}
	b.mu.Unlock()
	resp, err := b.client.Register(ctxT(h.t), req)
	if err != nil {
		h.t.Fatalf("register %s: %v", b.store, err)
	}
	b.mu.Lock()
	b.id = resp.ReplicaID
	b.mu.Unlock()
	b.learn(resp.View)
}

// beat sends one heartbeat from every broker that runs and reaches the
// controllers.
func (h *harness) beat() {
	h.t.Helper()
	for _, b := range h.fakes {
		if !b.reachable() {
			continue
		}
		b.mu.Lock()
		req := HeartbeatRequest{ClusterID: b.view.ClusterID, Group: "broker-a", ReplicaID: b.id, Incarnation: b.incarnation,
			LastEpoch: b.lastEpoch, LogEnd: b.logEnd, FencedEpoch: b.fencedEpoch, LeaseEpoch: b.leaseEpoch}
		b.mu.Unlock()
		v, err := b.client.Heartbeat(ctxT(h.t), req)
		if err != nil {
			h.t.Fatalf("heartbeat of replica %d: %v", req.ReplicaID, err)
		}
		b.mu.Lock()
		b.lease = 0
		if req.LeaseEpoch != 0 && v.LeaseEpoch == req.LeaseEpoch {
			b.lease, b.leaseAt = time.Duration(v.LeaseMillis)*time.Millisecond, h.clock.Now()
		}
		b.mu.Unlock()
		b.learn(v)
	}
}

// run advances the clock in steps of 1 s, each followed by heartbeats
// and a settled scan, for d in total.
func (h *harness) run(d time.Duration) {
	h.t.Helper()
	for step := time.Duration(0); step < d; step += time.Second {
		h.clock.Advance(time.Second)
		h.beat()
		h.settle()
	}
}

// alter is the master broker's AlterInSync.
func (h *harness) alter(master *fakeBroker, members ...*fakeBroker) (GroupView, error) {
	g := h.group()
	master.mu.Lock()
	req := AlterInSync{Group: "broker-a", MasterID: master.id, MasterIncarnation: master.incarnation,
		MasterEpoch: master.view.MasterEpoch, ExpectInSyncEpoch: g.InSyncEpoch}
	master.mu.Unlock()
	for _, m := range members {
		m.mu.Lock()
		req.InSync = append(req.InSync, Member{ID: m.id, Incarnation: m.incarnation})
		m.mu.Unlock()
	}
	v, err := master.client.AlterInSync(ctxT(h.t), req)
	if err == nil {
		for _, b := range h.fakes {
			b.learn(v)
		}
	}
	return v, err
}

// groupOfThree: replicas 1, 2, 3; 1 elected first (longest log) at epoch
// 1; then all three in sync.
func (h *harness) groupOfThree() (b1, b2, b3 *fakeBroker) {
	h.t.Helper()
	h.leader()
	b1, b2, b3 = h.addBroker("s1", 0, 300), h.addBroker("s2", 0, 200), h.addBroker("s3", 0, 100)
	h.run(testD + time.Second)
	g := h.group()
	if g.MasterID != b1.id || g.MasterEpoch != 1 || len(g.InSync) != 1 {
		h.t.Fatalf("first election: %+v", g)
	}
	if _, err := h.alter(b1, b1, b2, b3); err != nil {
		h.t.Fatal(err)
	}
	for _, b := range []*fakeBroker{b1, b2, b3} {
		b.mu.Lock()
		if !slices.Equal(b.fences, []uint32{1}) {
			h.t.Fatalf("replica %d fenced %v before the first election, want [1]", b.id, b.fences)
		}
		b.fences = nil // the scenarios count the fences after this
		b.mu.Unlock()
		b.setLog(1, 1000)
	}
	return b1, b2, b3
}

func (h *harness) expectNoElection(epoch uint32, d time.Duration) {
	h.t.Helper()
	h.run(d)
	if g := h.group(); g.MasterEpoch != epoch {
		h.t.Fatalf("unexpected election: epoch %d, want %d; history %+v", g.MasterEpoch, epoch, g.History)
	}
}

func (h *harness) waitEpoch(epoch uint32) *Group {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		h.clock.Advance(time.Second)
		h.beat()
		h.settle()
		if g := h.group(); g.MasterEpoch >= epoch {
			if g.MasterEpoch != epoch {
				h.t.Fatalf("epoch %d, want %d", g.MasterEpoch, epoch)
			}
			return g
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no election to epoch %d: %+v", epoch, h.group())
		}
	}
}

func isrIDs(g *Group) []ReplicaID {
	var out []ReplicaID
	for _, m := range g.InSync {
		out = append(out, m.ID)
	}
	return out
}

func (h *harness) brokersFor() Brokers {
	if h.realBrokers {
		return RemotingBrokers{}
	}
	return h.brokers
}
