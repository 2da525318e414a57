package controller

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/keelmq/keel/internal/remoting"
)

func TestParseVoters(t *testing.T) {
	vs, err := ParseVoters("n0-127.0.0.1:9878; n1-127.0.0.1:9868;n2-127.0.0.1:9858")
	if err != nil || len(vs) != 3 || vs[1] != (Voter{"n1", "127.0.0.1:9868"}) {
		t.Fatalf("%v %v", vs, err)
	}
	vs, err = ParseVoters("127.0.0.1:1,127.0.0.1:2")
	if err != nil || vs[0] != (Voter{"127.0.0.1:1", "127.0.0.1:1"}) {
		t.Fatalf("%v %v", vs, err)
	}
	for _, bad := range []string{"", "n0", "n0-x", "n0-127.0.0.1:1;n0-127.0.0.1:2", "a-127.0.0.1:1;b-127.0.0.1:1"} {
		if _, err := ParseVoters(bad); err == nil {
			t.Errorf("ParseVoters(%q) accepted", bad)
		}
	}
}

func TestEveryNodeKeepsTheBootstrappedClusterID(t *testing.T) {
	h := newHarness(t)
	h.leader()
	id := h.nodes[0].ClusterID()
	if len(id) != 36 {
		t.Fatalf("cluster id %q", id)
	}
	h.waitFor("every node to adopt the cluster id", func() bool {
		for i := range h.nodes {
			b, _ := os.ReadFile(filepath.Join(h.dirs[i], clusterIDFile))
			if strings.TrimSpace(string(b)) != id || h.nodes[i].FSM().ClusterID() != id {
				return false
			}
		}
		return true
	})
}

func TestBootstrapTwiceRefused(t *testing.T) {
	h := newHarness(t)
	h.leader()
	h.stop(0)
	ln, err := net.Listen("tcp", h.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, err = Open(h.config(0, ln, []Voter{{"n0", h.addrs[0]}}))
	if !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Fatalf("second bootstrap: %v", err)
	}
	// A node that only adopted the cluster id refuses too.
	h.stop(1)
	ln1, err := net.Listen("tcp", h.addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer ln1.Close()
	cfg := h.config(1, ln1, []Voter{{"n1", h.addrs[1]}})
	if _, err := Open(cfg); !errors.Is(err, ErrAlreadyBootstrapped) {
		t.Fatalf("bootstrap of a member: %v", err)
	}
}

func TestClusterIDMismatchRefused(t *testing.T) {
	h := newHarness(t)
	l := h.leader()

	// A second cluster, bootstrapped alone; its raft connections to the
	// first cluster's nodes are refused in the handshake.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := Config{Addr: ln.Addr().String(), Listener: ln, DataDir: t.TempDir()}
	other.Bootstrap = []Voter{{ID: other.Addr, Addr: other.Addr}}
	oc, err := Open(other)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	layer := &raftLayer{chanListener{m: oc.mux, ch: oc.mux.raftCh}}
	for _, a := range h.addrs {
		if _, err := layer.Dial(raft.ServerAddress(a), time.Second); !errors.Is(err, errClusterRefused) {
			t.Fatalf("raft dial from another cluster to %s: %v", a, err)
		}
	}
	if id := oc.ClusterID(); id == h.nodes[l].ClusterID() || id == "" {
		t.Fatalf("second cluster id %q", id)
	}

	// A broker presenting another cluster id is refused too.
	cl := NewClient(h.addrs)
	defer cl.Close()
	_, err = cl.Register(ctxT(t), RegisterRequest{ClusterID: oc.ClusterID(), Group: "broker-a", StoreUUID: "s1", Addr: "b:1", Incarnation: 1})
	if !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("register with another cluster id: %v", err)
	}
	_, err = cl.Heartbeat(ctxT(t), HeartbeatRequest{ClusterID: oc.ClusterID(), Group: "broker-a", ReplicaID: 1})
	if !errors.Is(err, ErrClusterMismatch) {
		t.Fatalf("heartbeat with another cluster id: %v", err)
	}
	if g := h.nodes[l].FSM().Group("broker-a"); g != nil {
		t.Fatalf("a refused registration created a group: %+v", g)
	}
}

func TestFollowerAnswersLeaderAddress(t *testing.T) {
	h := newHarness(t)
	l := h.leader()
	f := (l + 1) % 3
	c, err := remoting.Dial(context.Background(), h.addrs[f], remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h.waitFor("the follower to know the leader", func() bool { return h.nodes[f].LeaderAddr() == h.addrs[l] })
	resp, err := c.Invoke(ctxT(t), remoting.NewRequest(remoting.ReqControllerGetGroup, map[string]string{"group": "x"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Code != remoting.ResControllerNotLeader || resp.Ext("leaderAddr") != h.addrs[l] {
		t.Fatalf("follower answered %d %q %v", resp.Code, resp.Remark, resp.ExtFields)
	}
	// The client follows it: a client that knows only the follower
	// reaches the leader.
	cl := NewClient([]string{h.addrs[f]})
	defer cl.Close()
	if _, err := cl.GetGroup(ctxT(t), "nope"); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("get group through a follower: %v", err)
	}
	if cl.Leader() != h.addrs[l] {
		t.Fatalf("client follows %q, want %q", cl.Leader(), h.addrs[l])
	}
	// Malformed bodies are refused, not applied.
	resp, err = c.Invoke(ctxT(t), remoting.NewRequest(remoting.ReqControllerHeartbeat, nil, []byte("{")))
	if err != nil || resp.Code == remoting.ResSuccess {
		t.Fatalf("malformed heartbeat: %v %+v", err, resp)
	}
}

func TestOversizedFrameClosesTheConnection(t *testing.T) {
	h := newHarness(t)
	h.leader()
	c, err := net.Dial("tcp", h.addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[0:], MaxFrameBytes+1)
	binary.BigEndian.PutUint32(hdr[4:], 16)
	c.Write(hdr[:])
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("oversized frame: read %v, want the connection closed", err)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// brokerSide is a broker's side of the fence, served over remoting.
type brokerSide struct {
	mu      sync.Mutex
	fenced  uint32
	views   chan GroupView
	replica ReplicaID
}

func (b *brokerSide) Fence(r FenceRequest) (FenceResponse, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if r.Epoch < b.fenced {
		return FenceResponse{}, ErrFenced
	}
	b.fenced = r.Epoch
	return FenceResponse{ReplicaID: b.replica, Incarnation: 7, FencedEpoch: r.Epoch, LastEpoch: 3, LogEnd: 4096}, nil
}

func (b *brokerSide) RoleChanged(v GroupView) { b.views <- v }

func TestFenceOverRemoting(t *testing.T) {
	bs := &brokerSide{views: make(chan GroupView, 1), replica: 5}
	srv := remoting.NewServer(remoting.ServerConfig{}, remoting.HandlerFunc(func(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
		if resp := ServeBroker(bs, req); resp != nil {
			return resp
		}
		return req.NewResponse(remoting.ResRequestCodeNotSupported, "")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	r := Replica{ID: 5, Addr: ln.Addr().String()}
	var b RemotingBrokers
	resp, err := b.Fence(ctxT(t), r, FenceRequest{ClusterID: "c", Group: "g", Epoch: 4, ReplicaID: 5})
	if err != nil || resp != (FenceResponse{ReplicaID: 5, Incarnation: 7, FencedEpoch: 4, LastEpoch: 3, LogEnd: 4096}) {
		t.Fatalf("fence: %+v %v", resp, err)
	}
	if _, err := b.Fence(ctxT(t), r, FenceRequest{Epoch: 3}); !errors.Is(err, ErrFenced) {
		t.Fatalf("fence below the promise: %v", err)
	}
	if err := b.RoleChanged(ctxT(t), r, GroupView{Group: "g", MasterEpoch: 4}); err != nil {
		t.Fatal(err)
	}
	if v := <-bs.views; v.MasterEpoch != 4 {
		t.Fatalf("view %+v", v)
	}
}

// TestRestartAfterSnapshot: a node restarted after taking a snapshot comes
// back with the state (raft restores the snapshot, then replays the log).
func TestRestartAfterSnapshot(t *testing.T) {
	h := newHarness(t)
	h.groupOfThree()
	l := h.leader()
	if err := h.nodes[l].raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	want := h.nodes[l].FSM().Group("broker-a")
	h.stop(l)
	h.leader()
	h.start(l, nil, nil)
	h.waitFor("the restarted node to hold the group", func() bool {
		g := h.nodes[l].FSM().Group("broker-a")
		return g != nil && g.MasterEpoch == want.MasterEpoch && len(g.InSync) == len(want.InSync)
	})
}
