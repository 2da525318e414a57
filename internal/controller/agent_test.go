package controller

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// testAgent is a broker process: an Agent, the remoting server the
// controller's fences reach it on, and a log the test sets.
type testAgent struct {
	dir, addr string
	agent     *Agent
	srv       *remoting.Server
	cancel    context.CancelFunc
	done      chan struct{}

	mu     sync.Mutex
	epoch  uint32
	end    int64
	fences []uint32
	views  []GroupView
}

func (ta *testAgent) setLog(epoch uint32, end int64) {
	ta.mu.Lock()
	ta.epoch, ta.end = epoch, end
	ta.mu.Unlock()
}

func (ta *testAgent) lastView() GroupView {
	ta.mu.Lock()
	defer ta.mu.Unlock()
	if len(ta.views) == 0 {
		return GroupView{}
	}
	return ta.views[len(ta.views)-1]
}

// startAgent starts a broker process on dir (a restart when dir holds an
// agent file).
func startAgent(t *testing.T, h *harness, dir string, epoch uint32, end int64, opts ...func(*AgentConfig)) *testAgent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ta := &testAgent{dir: dir, addr: ln.Addr().String(), epoch: epoch, end: end, done: make(chan struct{})}
	cfg := AgentConfig{Group: "broker-a", Dir: dir, Addr: ta.addr, HAAddr: ta.addr + "-ha", Controllers: h.addrs,
		HeartbeatInterval: 20 * time.Millisecond,
		Log: func() (uint32, int64) {
			ta.mu.Lock()
			defer ta.mu.Unlock()
			return ta.epoch, ta.end
		},
		Fence: func(e uint32) error {
			ta.mu.Lock()
			ta.fences = append(ta.fences, e)
			ta.mu.Unlock()
			return nil
		},
		OnView: func(v GroupView) {
			ta.mu.Lock()
			ta.views = append(ta.views, v)
			ta.mu.Unlock()
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	ta.agent, err = OpenAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ta.srv = remoting.NewServer(remoting.ServerConfig{}, remoting.HandlerFunc(func(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
		if resp := ServeBroker(ta.agent, req); resp != nil {
			return resp
		}
		return req.NewResponse(remoting.ResRequestCodeNotSupported, "")
	}))
	go ta.srv.Serve(ln)
	var ctx context.Context
	ctx, ta.cancel = context.WithCancel(context.Background())
	go func() {
		defer close(ta.done)
		ta.agent.Run(ctx)
	}()
	t.Cleanup(ta.stop)
	return ta
}

// stop is a crash of the broker process (idempotent).
func (ta *testAgent) stop() {
	ta.cancel()
	<-ta.done
	ta.srv.Shutdown(context.Background())
}

// advanceUntil moves the manual clock a second at a time until cond
// holds; after each step it waits until the leader holds a heartbeat at
// the new time from every agent in live (they heartbeat on their own).
func advanceUntil(h *harness, what string, live []*testAgent, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		h.clock.Advance(time.Second)
		now := h.clock.Now()
		h.waitFor("heartbeats at the new clock time", func() bool {
			l := h.nodes[h.leader()]
			l.lead.mu.Lock()
			defer l.lead.mu.Unlock()
			for _, a := range live {
				if hb, ok := l.lead.live[a.agent.ReplicaID()]; !ok || hb.at.Before(now) {
					return false
				}
			}
			return true
		})
		h.settle()
	}
}

// TestAgentsFailover runs the whole controller protocol over remoting
// with the broker-side Agent: registration, heartbeats, fences sent by
// the leader to the brokers' servers and kept in their agent files, views
// delivered, a restart keeping the replica id.
func TestAgentsFailover(t *testing.T) {
	h := newHarness(t, func(h *harness) { h.realBrokers = true })
	h.leader()
	a1 := startAgent(t, h, t.TempDir(), 0, 300)
	a2 := startAgent(t, h, t.TempDir(), 0, 200)
	a3 := startAgent(t, h, t.TempDir(), 0, 100)
	advanceUntil(h, "the first election", []*testAgent{a1, a2, a3}, func() bool { g := h.group(); return g != nil && g.MasterEpoch == 1 })
	if g := h.group(); g.MasterID != a1.agent.ReplicaID() {
		t.Fatalf("first master %d, want replica %d (longest log)", g.MasterID, a1.agent.ReplicaID())
	}
	h.waitFor("the master's agent to deliver its view", func() bool { return a1.lastView().MasterEpoch == 1 })
	var isr []Member
	for _, a := range []*testAgent{a1, a2, a3} {
		isr = append(isr, Member{ID: a.agent.ReplicaID(), Incarnation: a.agent.Incarnation()})
		a.setLog(1, 1000)
	}
	if _, err := a1.agent.AlterInSync(ctxT(t), h.group().InSyncEpoch, isr); err != nil {
		t.Fatal(err)
	}
	a2.setLog(1, 1400)
	id1 := a1.agent.ReplicaID()
	a1.stop() // the master's process dies

	advanceUntil(h, "the failover", []*testAgent{a2, a3}, func() bool { return h.group().MasterEpoch == 2 })
	g := h.group()
	if g.MasterID != a2.agent.ReplicaID() {
		t.Fatalf("new master %d, want replica %d", g.MasterID, a2.agent.ReplicaID())
	}
	for _, a := range []*testAgent{a2, a3} {
		a.mu.Lock()
		fences := slices.Clone(a.fences)
		a.mu.Unlock()
		if fences[len(fences)-1] != 2 {
			t.Fatalf("replica %d fences %v", a.agent.ReplicaID(), fences)
		}
		var st agentState
		b, _ := os.ReadFile(filepath.Join(a.dir, AgentFile))
		if err := json.Unmarshal(b, &st); err != nil || st.FencedEpoch != 2 || st.ClusterID != h.nodes[h.leader()].ClusterID() {
			t.Fatalf("agent file of replica %d: %s (%v)", a.agent.ReplicaID(), b, err)
		}
		h.waitFor("the new view delivered", func() bool { v := a.lastView(); return v.MasterEpoch == 2 && v.MasterID == g.MasterID })
	}
	// The old master restarts from its directory: the same replica id, a
	// new incarnation, and the view of epoch 2 naming another master.
	a1again := startAgent(t, h, a1.dir, 1, 1000)
	h.waitFor("the restarted master's view", func() bool {
		v := a1again.lastView()
		return v.MasterEpoch == 2 && v.MasterID == a2.agent.ReplicaID()
	})
	if a1again.agent.ReplicaID() != id1 || a1again.agent.Incarnation() == a1.agent.Incarnation() {
		t.Fatalf("restart: replica %d incarnation %d, before %d/%d", a1again.agent.ReplicaID(), a1again.agent.Incarnation(), id1, a1.agent.Incarnation())
	}
	// A fence below its promise is refused over the wire.
	var b RemotingBrokers
	rep := Replica{ID: a2.agent.ReplicaID(), Addr: a2.addr}
	_, err := b.Fence(ctxT(t), rep, FenceRequest{ClusterID: h.nodes[h.leader()].ClusterID(), Group: "broker-a", Epoch: 1, ReplicaID: rep.ID})
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("a fence below the promised epoch: %v", err)
	}
}

// TestAgentRefusesAnotherCluster: an agent whose file names another
// cluster stops (a store never joins a second cluster), and a damaged
// agent file is refused at open.
func TestAgentRefusesAnotherCluster(t *testing.T) {
	h := newHarness(t, func(h *harness) { h.realBrokers = true })
	h.leader()
	dir := t.TempDir()
	b, _ := json.Marshal(agentState{StoreUUID: "s-1", ClusterID: "another-cluster"})
	if err := os.WriteFile(filepath.Join(dir, AgentFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := OpenAgent(AgentConfig{Group: "broker-a", Dir: dir, Addr: "127.0.0.1:1", Controllers: h.addrs, HeartbeatInterval: 10 * time.Millisecond,
		Log: func() (uint32, int64) { return 0, 0 }, Fence: func(uint32) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.Run(ctxT(t)); !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("agent of another cluster: Run returned %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("Run took %v to give up", d)
	}
	if g := h.nodes[h.leader()].FSM().Group("broker-a"); g != nil {
		t.Fatalf("the refused agent registered: %+v", g)
	}
	if err := os.WriteFile(filepath.Join(dir, AgentFile), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenAgent(AgentConfig{Group: "broker-a", Dir: dir, Addr: "a", Controllers: h.addrs,
		Log: func() (uint32, int64) { return 0, 0 }, Fence: func(uint32) error { return nil }}); err == nil {
		t.Fatal("a damaged agent file was accepted")
	}
}
