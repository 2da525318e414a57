package controller

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// Agent is the broker's side of the protocol that does not touch the data
// path: it keeps the broker's identity in the store directory, registers,
// heartbeats, delivers newer views, and answers fences after keeping the
// promise durably. The replication layer plugs in through AgentConfig:
// Log (its epoch history and log end), Fence (refuse masters below an
// epoch) and OnView (promote or follow); keel broker runs one in
// controller mode.

// AgentFile is the file in the store directory holding an agent's
// identity.
const AgentFile = "controller.json"

// agentState is AgentFile's content.
type agentState struct {
	StoreUUID   string    `json:"storeUuid"`
	ClusterID   string    `json:"clusterId,omitempty"`
	ReplicaID   ReplicaID `json:"replicaId,omitempty"`
	FencedEpoch uint32    `json:"fencedEpoch,omitempty"`
}

// AgentConfig configures an Agent.
type AgentConfig struct {
	Group       string   // brokerName
	Dir         string   // the broker's store directory (AgentFile lives there)
	Addr        string   // the broker's remoting address (it routes the controller's requests to ServeBroker)
	HAAddr      string   // the broker's replication address
	AMQPAddr    string   // the broker's AMQP address ("": none)
	Controllers []string // controllerAddr
	// HeartbeatInterval defaults to 1 s.
	HeartbeatInterval time.Duration
	// Log reports the newest epoch of the epoch history and the written
	// log end.
	Log func() (lastEpoch uint32, logEnd int64)
	// Fence makes the replication layer refuse, from now on, every master
	// below epoch (called after the promise is durable, before the fence
	// is answered); an error refuses the fence. Fence and Log run under
	// the agent's lock: they must not call the Agent.
	Fence func(epoch uint32) error
	// OnView receives, from one goroutine, the newest view each time its
	// MasterEpoch is above the last one delivered (views in between may
	// be skipped).
	OnView func(GroupView)
	// Lease, if set, names the master epoch at which the broker asks for
	// a lease in its heartbeats (an ASYNC_MASTER: lease.go); 0 asks for
	// none. OnLease then receives each grant: the broker may acknowledge
	// writes at epoch until the given time, on its monotonic clock,
	// measured from when the heartbeat was sent. While a lease is asked
	// for, heartbeats go at least every third of the lease.
	Lease   func() uint32
	OnLease func(epoch uint32, until time.Time)
	Logger  *slog.Logger
}

// Agent runs a broker's registration and heartbeats.
type Agent struct {
	cfg         AgentConfig
	incarnation uint64
	client      *Client

	mu sync.Mutex // guards st and its file
	st agentState

	fences atomic.Uint64 // fence requests answered with a promise
	// leaseMillis is the last lease granted (heartbeats then go at least
	// every third of it).
	leaseMillis atomic.Int64

	beat chan struct{} // HeartbeatNow (capacity 1)

	viewMu sync.Mutex
	view   GroupView     // newest view seen
	newer  chan struct{} // signalled when view changed (capacity 1: coalesces)
}

// OpenAgent loads (or creates) the agent's identity in Dir and draws a
// new incarnation. It starts nothing.
func OpenAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Group == "" || cfg.Dir == "" || cfg.Addr == "" || len(cfg.Controllers) == 0 || cfg.Log == nil || cfg.Fence == nil {
		return nil, errors.New("controller: agent needs Group, Dir, Addr, Controllers, Log and Fence")
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = time.Second
	}
	if cfg.OnView == nil {
		cfg.OnView = func(GroupView) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &Agent{cfg: cfg, client: NewClient(cfg.Controllers), newer: make(chan struct{}, 1), beat: make(chan struct{}, 1)}
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, err
	}
	a.incarnation = binary.BigEndian.Uint64(b[:]) | 1 // never 0
	data, err := os.ReadFile(filepath.Join(cfg.Dir, AgentFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		a.st.StoreUUID = newUUID()
		if err := a.persist(a.st); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, fmt.Errorf("controller: %w", err)
	default:
		if err := json.Unmarshal(data, &a.st); err != nil || a.st.StoreUUID == "" {
			return nil, fmt.Errorf("controller: %s: not an agent file (%v)", filepath.Join(cfg.Dir, AgentFile), err)
		}
	}
	return a, nil
}

// persist writes st durably (temp file, fsync, rename, directory sync).
func (a *Agent) persist(st agentState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	if err := vfs.WriteFileDurable(vfs.OS{}, filepath.Join(a.cfg.Dir, AgentFile), b, 0o644); err != nil {
		return fmt.Errorf("controller: keep agent state: %w", err)
	}
	return nil
}

// Incarnation is this process's incarnation.
func (a *Agent) Incarnation() uint64 { return a.incarnation }

// ReplicaID is the id the controller gave this store (0 before the first
// registration).
func (a *Agent) ReplicaID() ReplicaID {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.ReplicaID
}

// FencedEpoch is the highest epoch promised.
func (a *Agent) FencedEpoch() uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.st.FencedEpoch
}

// View is the newest view seen.
func (a *Agent) View() GroupView {
	a.viewMu.Lock()
	defer a.viewMu.Unlock()
	return a.view
}

// Run registers, then heartbeats every HeartbeatInterval until ctx ends,
// registering again when the controller asks for it.
func (a *Agent) Run(ctx context.Context) error {
	defer a.client.Close()
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.deliver(ctx)
	}()
	defer func() { cancel(); <-done }()
	t := time.NewTimer(a.cfg.HeartbeatInterval)
	defer t.Stop()
	registered := false
	for {
		var err error
		if !registered {
			err = a.register(ctx)
			registered = err == nil
		} else if err = a.heartbeat(ctx); errors.Is(err, ErrUnknownReplica) || errors.Is(err, ErrStaleIncarnation) || errors.Is(err, ErrUnknownGroup) {
			registered = false
		}
		if err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("controller agent: request failed", "group", a.cfg.Group, "err", err)
			if errors.Is(err, ErrClusterMismatch) || errors.Is(err, ErrReplicaIDMismatch) {
				return err // another cluster, or a copied store: never go on
			}
		}
		next := a.cfg.HeartbeatInterval
		if l := time.Duration(a.leaseMillis.Load()) * time.Millisecond; l > 0 && a.leaseEpoch() != 0 {
			next = min(next, l/3)
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.beat:
			t.Stop() // Reset above re-arms it (no stale tick since Go 1.23)
		}
	}
}

// HeartbeatNow has the next heartbeat sent at once (a new ASYNC_MASTER
// asks for its first lease without waiting an interval).
func (a *Agent) HeartbeatNow() {
	select {
	case a.beat <- struct{}{}:
	default:
	}
}

// leaseEpoch is the epoch a lease is asked for at (0: none).
func (a *Agent) leaseEpoch() uint32 {
	if a.cfg.Lease == nil || a.cfg.OnLease == nil {
		return 0
	}
	return a.cfg.Lease()
}

func (a *Agent) register(ctx context.Context) error {
	a.mu.Lock()
	req := RegisterRequest{ClusterID: a.st.ClusterID, Group: a.cfg.Group, StoreUUID: a.st.StoreUUID, ReplicaID: a.st.ReplicaID,
		Addr: a.cfg.Addr, HAAddr: a.cfg.HAAddr, AMQPAddr: a.cfg.AMQPAddr, Incarnation: a.incarnation}
	a.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 2*a.cfg.HeartbeatInterval+time.Second)
	defer cancel()
	resp, err := a.client.Register(ctx, req)
	if err != nil {
		return err
	}
	a.mu.Lock()
	st := a.st
	st.ClusterID, st.ReplicaID = resp.View.ClusterID, resp.ReplicaID
	if st != a.st {
		if err := a.persist(st); err != nil {
			a.mu.Unlock()
			return err
		}
		a.st = st
	}
	a.mu.Unlock()
	a.learn(resp.View)
	return nil
}

func (a *Agent) heartbeat(ctx context.Context) error {
	lease := a.leaseEpoch()
	lastEpoch, logEnd := a.cfg.Log()
	a.mu.Lock()
	req := HeartbeatRequest{ClusterID: a.st.ClusterID, Group: a.cfg.Group, ReplicaID: a.st.ReplicaID, Incarnation: a.incarnation,
		LastEpoch: lastEpoch, LogEnd: logEnd, FencedEpoch: a.st.FencedEpoch, LeaseEpoch: lease}
	a.mu.Unlock()
	wait := 2*a.cfg.HeartbeatInterval + time.Second
	if l := time.Duration(a.leaseMillis.Load()) * time.Millisecond; lease != 0 && l > 0 {
		wait = min(wait, l) // a grant arriving later would have ended already
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// A lease runs from before the request left (time.Now carries the
	// monotonic clock): the grant reaches the broker later than the
	// leader gave it, so delays only shorten the lease here.
	sent := time.Now()
	v, err := a.client.Heartbeat(ctx, req)
	if err != nil {
		return err
	}
	if lease != 0 && v.LeaseEpoch == lease && v.LeaseMillis > 0 {
		a.leaseMillis.Store(v.LeaseMillis)
		a.cfg.OnLease(lease, sent.Add(time.Duration(v.LeaseMillis)*time.Millisecond))
	}
	a.learn(v)
	return nil
}

// learn keeps the newest view (a lower epoch is ignored) and wakes the
// delivery.
func (a *Agent) learn(v GroupView) {
	a.viewMu.Lock()
	if a.view.Group != "" && v.MasterEpoch < a.view.MasterEpoch {
		a.viewMu.Unlock()
		return
	}
	a.view = v
	a.viewMu.Unlock()
	select {
	case a.newer <- struct{}{}:
	default:
	}
}

// deliver hands OnView each newest view whose epoch is above the last one
// delivered (views in between may be skipped: only the newest matters).
func (a *Agent) deliver(ctx context.Context) {
	delivered, any := uint32(0), false
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.newer:
		}
		v := a.View()
		if !any || v.MasterEpoch > delivered {
			a.cfg.OnView(v)
			delivered, any = v.MasterEpoch, true
		}
	}
}

// AlterInSync proposes, as the group's master, a new in-sync set against
// expectInSyncEpoch (the replication layer decides the set; the agent
// adds who it is, its incarnation and the epoch it is master at).
func (a *Agent) AlterInSync(ctx context.Context, expectInSyncEpoch uint32, inSync []Member) (GroupView, error) {
	v := a.View()
	a.mu.Lock()
	req := AlterInSync{Group: a.cfg.Group, MasterID: a.st.ReplicaID, MasterIncarnation: a.incarnation, MasterEpoch: v.MasterEpoch,
		ExpectInSyncEpoch: expectInSyncEpoch, InSync: inSync}
	a.mu.Unlock()
	nv, err := a.client.AlterInSync(ctx, req)
	if err == nil {
		a.learn(nv)
	}
	return nv, err
}

// Fence serves the leader's fence (BrokerSide): the promise is kept
// durably, then the replication layer enforces it, then the log is read.
func (a *Agent) Fence(req FenceRequest) (FenceResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if req.ClusterID != a.st.ClusterID || req.Group != a.cfg.Group || req.ReplicaID != a.st.ReplicaID {
		return FenceResponse{}, fmt.Errorf("%w: fence for %s/%s replica %d, this is %s/%s replica %d", ErrClusterMismatch,
			req.ClusterID, req.Group, req.ReplicaID, a.st.ClusterID, a.cfg.Group, a.st.ReplicaID)
	}
	if req.Epoch < a.st.FencedEpoch {
		return FenceResponse{}, fmt.Errorf("%w: promised %d, asked %d", ErrFenced, a.st.FencedEpoch, req.Epoch)
	}
	if req.Epoch > a.st.FencedEpoch {
		st := a.st
		st.FencedEpoch = req.Epoch
		if err := a.persist(st); err != nil {
			return FenceResponse{}, err
		}
		a.st = st
	}
	if err := a.cfg.Fence(req.Epoch); err != nil {
		return FenceResponse{}, fmt.Errorf("controller: fence at %d: %w", req.Epoch, err)
	}
	lastEpoch, logEnd := a.cfg.Log()
	a.fences.Add(1)
	return FenceResponse{ReplicaID: a.st.ReplicaID, Incarnation: a.incarnation, FencedEpoch: req.Epoch, LastEpoch: lastEpoch, LogEnd: logEnd}, nil
}

// Fences counts the fence requests answered with a promise since the
// agent opened.
func (a *Agent) Fences() uint64 { return a.fences.Load() }

// RoleChanged serves the leader's notification (BrokerSide).
func (a *Agent) RoleChanged(v GroupView) {
	a.mu.Lock()
	ok := v.ClusterID == a.st.ClusterID && v.Group == a.cfg.Group
	a.mu.Unlock()
	if ok {
		a.learn(v)
	}
}
