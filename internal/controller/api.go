package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// The API brokers and operators use (over remoting: rpc.go). Every method
// but Status is served by the acting leader only; the others answer a
// *NotLeaderError naming the leader they know.

// ErrNotLeader: this node is not the acting leader.
var ErrNotLeader = errors.New("controller: not the leader")

// NotLeaderError is ErrNotLeader with the leader's address ("" when
// unknown, e.g. during a raft election).
type NotLeaderError struct{ Leader string }

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "controller: not the leader (leader unknown)"
	}
	return "controller: not the leader; the leader is " + e.Leader
}

func (e *NotLeaderError) Is(target error) bool { return target == ErrNotLeader }

// GroupView is what a broker learns of its group: the master (id,
// addresses, epoch), the in-sync set and every replica's addresses.
// Brokers act only on a view whose MasterEpoch is above the one they know.
type GroupView struct {
	ClusterID    string    `json:"clusterId"`
	Group        string    `json:"group"`
	MasterID     ReplicaID `json:"masterId"`
	MasterAddr   string    `json:"masterAddr,omitempty"`
	MasterHAAddr string    `json:"masterHaAddr,omitempty"`
	// MasterAMQPAddr is the master's AMQP address ("": none or not told).
	MasterAMQPAddr string    `json:"masterAmqpAddr,omitempty"`
	MasterEpoch    uint32    `json:"masterEpoch"`
	InSync         []Member  `json:"inSync"`
	InSyncEpoch    uint32    `json:"inSyncEpoch"`
	Replicas       []Replica `json:"replicas"`
	// LeaseEpoch and LeaseMillis are set only in the answer to a
	// heartbeat that asked for a lease (lease.go) and got one: the
	// master may acknowledge writes at LeaseEpoch for LeaseMillis from
	// when it sent that heartbeat.
	LeaseEpoch  uint32 `json:"leaseEpoch,omitempty"`
	LeaseMillis int64  `json:"leaseMillis,omitempty"`
}

func viewOf(cluster string, g *Group) GroupView {
	v := GroupView{ClusterID: cluster, Group: g.Name, MasterID: g.MasterID, MasterEpoch: g.MasterEpoch,
		InSync: slices.Clone(g.InSync), InSyncEpoch: g.InSyncEpoch}
	for _, r := range g.Replicas {
		v.Replicas = append(v.Replicas, *r)
	}
	slices.SortFunc(v.Replicas, func(a, b Replica) int { return cmp.Compare(a.ID, b.ID) })
	if m := g.Replicas[g.MasterID]; m != nil {
		v.MasterAddr, v.MasterHAAddr, v.MasterAMQPAddr = m.Addr, m.HAAddr, m.AMQPAddr
	}
	return v
}

// RegisterRequest is a broker's registration at process start (and after
// an ErrUnknownReplica or ErrStaleIncarnation answer). ClusterID is empty
// on a store's first registration: the answer carries the cluster id the
// broker then keeps and presents.
type RegisterRequest = RegisterReplica

// RegisterResponse gives the replica its id and the group's view.
type RegisterResponse struct {
	ReplicaID ReplicaID `json:"replicaId"`
	View      GroupView `json:"view"`
}

// HeartbeatRequest is a broker's periodic liveness report.
type HeartbeatRequest struct {
	ClusterID   string    `json:"clusterId"`
	Group       string    `json:"group"`
	ReplicaID   ReplicaID `json:"replicaId"`
	Incarnation uint64    `json:"incarnation"`
	// LastEpoch is the newest epoch in the replica's log, LogEnd its end.
	LastEpoch uint32 `json:"lastEpoch"`
	LogEnd    int64  `json:"logEnd"`
	// FencedEpoch is the highest epoch the replica promised in a fence (0:
	// none). A master fenced above its own epoch takes no writes: the
	// leader treats it as gone and elects (it is a candidate itself), so a
	// fence whose election never committed does not leave the group stuck.
	FencedEpoch uint32 `json:"fencedEpoch,omitempty"`
	// LeaseEpoch, if not 0, asks for a lease (lease.go): an ASYNC_MASTER
	// names the master epoch it writes at.
	LeaseEpoch uint32 `json:"leaseEpoch,omitempty"`
}

// FenceRequest is the controller's request to a candidate (the broker
// serves it): promise never to follow or acknowledge a master of an epoch
// below Epoch.
type FenceRequest struct {
	ClusterID string    `json:"clusterId"`
	Group     string    `json:"group"`
	Epoch     uint32    `json:"epoch"`
	ReplicaID ReplicaID `json:"replicaId"`
}

// FenceResponse is a fenced replica's answer: who it is, the epoch it now
// promised (FencedEpoch = the request's Epoch, or a higher one it had
// promised before: then the controller does not count it), and its log.
type FenceResponse struct {
	ReplicaID   ReplicaID `json:"replicaId"`
	Incarnation uint64    `json:"incarnation"`
	FencedEpoch uint32    `json:"fencedEpoch"`
	LastEpoch   uint32    `json:"lastEpoch"`
	LogEnd      int64     `json:"logEnd"`
}

// Brokers is how the leader reaches brokers: the fence before an
// election and the notification after it. RemotingBrokers is the real
// one; tests use fakes.
type Brokers interface {
	Fence(ctx context.Context, r Replica, req FenceRequest) (FenceResponse, error)
	RoleChanged(ctx context.Context, r Replica, view GroupView) error
}

// Register registers a broker's store (RegisterReplica).
func (c *Controller) Register(req RegisterRequest) (RegisterResponse, error) {
	if !c.acting() {
		return RegisterResponse{}, &NotLeaderError{Leader: c.LeaderAddr()}
	}
	if req.ClusterID == "" {
		req.ClusterID = c.fsm.ClusterID() // a store's first registration
	}
	r, err := c.applyOK(&Command{TimeMillis: c.cfg.Clock.Now().UnixMilli(), Register: &req})
	if err != nil {
		return RegisterResponse{}, err
	}
	// A registration is a sign of life at the new incarnation (the old one
	// is gone): the replica is a candidate at once, before its first
	// heartbeat; its fence answer gives its log.
	c.lead.mu.Lock()
	if c.lead.live != nil {
		c.lead.live[r.Replica] = liveness{incarnation: req.Incarnation, at: c.cfg.Clock.Now()}
	}
	c.lead.mu.Unlock()
	return RegisterResponse{ReplicaID: r.Replica, View: viewOf(req.ClusterID, r.Group)}, nil
}

// Heartbeat records a replica's liveness and answers its group's view.
func (c *Controller) Heartbeat(req HeartbeatRequest) (GroupView, error) {
	if !c.acting() {
		return GroupView{}, &NotLeaderError{Leader: c.LeaderAddr()}
	}
	cluster := c.fsm.ClusterID()
	if req.ClusterID != cluster {
		return GroupView{}, fmt.Errorf("%w: cluster is %s, broker says %q", ErrClusterMismatch, cluster, req.ClusterID)
	}
	g := c.fsm.Group(req.Group)
	if g == nil {
		return GroupView{}, fmt.Errorf("%w: %q (register first)", ErrUnknownGroup, req.Group)
	}
	r := g.Replicas[req.ReplicaID]
	if r == nil {
		return GroupView{}, fmt.Errorf("%w: %d in group %s (register first)", ErrUnknownReplica, req.ReplicaID, req.Group)
	}
	if r.Incarnation != req.Incarnation {
		return GroupView{}, fmt.Errorf("%w: replica %d registered incarnation %d, heartbeat says %d (register again)",
			ErrStaleIncarnation, r.ID, r.Incarnation, req.Incarnation)
	}
	now := c.cfg.Clock.Now()
	c.lead.mu.Lock()
	if c.lead.live != nil {
		c.lead.live[r.ID] = liveness{incarnation: req.Incarnation, lastEpoch: req.LastEpoch, logEnd: req.LogEnd, fencedEpoch: req.FencedEpoch, at: now}
	}
	c.lead.mu.Unlock()
	v := viewOf(cluster, g)
	if d := c.grantLease(g, req); d > 0 {
		v.LeaseEpoch, v.LeaseMillis = req.LeaseEpoch, d.Milliseconds()
	}
	return v, nil
}

// AlterInSync commits the master's change of its in-sync set.
func (c *Controller) AlterInSync(req AlterInSync) (GroupView, error) {
	if !c.acting() {
		return GroupView{}, &NotLeaderError{Leader: c.LeaderAddr()}
	}
	r, err := c.applyOK(&Command{TimeMillis: c.cfg.Clock.Now().UnixMilli(), AlterInSync: &req})
	if err != nil {
		return GroupView{}, err
	}
	return viewOf(c.fsm.ClusterID(), r.Group), nil
}

// SetAllowUnclean is the operator's switch for one group (audited).
func (c *Controller) SetAllowUnclean(req AllowUnclean) (GroupView, error) {
	if !c.acting() {
		return GroupView{}, &NotLeaderError{Leader: c.LeaderAddr()}
	}
	r, err := c.applyOK(&Command{TimeMillis: c.cfg.Clock.Now().UnixMilli(), AllowUnclean: &req})
	if err != nil {
		return GroupView{}, err
	}
	return viewOf(c.fsm.ClusterID(), r.Group), nil
}

// GetGroup answers a group's view (the brokers' poll).
func (c *Controller) GetGroup(name string) (GroupView, error) {
	if !c.acting() {
		return GroupView{}, &NotLeaderError{Leader: c.LeaderAddr()}
	}
	g := c.fsm.Group(name)
	if g == nil {
		return GroupView{}, fmt.Errorf("%w: %q", ErrUnknownGroup, name)
	}
	return viewOf(c.fsm.ClusterID(), g), nil
}

func (c *Controller) applyOK(cmd *Command) (*Result, error) {
	r, err := c.apply(cmd)
	if err != nil {
		return nil, err
	}
	if r.Err != nil {
		return nil, r.Err
	}
	return r, nil
}

// Status is one node's view of the controller cluster.
type Status struct {
	NodeID       string   `json:"nodeId"`
	Addr         string   `json:"addr"`
	State        string   `json:"state"` // raft's: Leader, Follower, Candidate
	Acting       bool     `json:"acting"`
	LeaderID     string   `json:"leaderId"`
	LeaderAddr   string   `json:"leaderAddr"`
	Term         uint64   `json:"term"`
	AppliedIndex uint64   `json:"appliedIndex"`
	ClusterID    string   `json:"clusterId"`
	Voters       []Voter  `json:"voters"`
	Groups       []*Group `json:"groups"`
	// Live is the leader's soft state (empty on other nodes).
	Live []ReplicaLiveness `json:"live,omitempty"`
	// ElectionsFrom is the Clock time (ms) before which this leader
	// starts no election (a detection period after it began acting).
	ElectionsFromMillis int64 `json:"electionsFromMillis,omitempty"`
	// WithoutMaster: groups the leader found without a live master and
	// could not elect for, with the Clock time (ms) it first saw that.
	WithoutMaster map[string]int64 `json:"withoutMaster,omitempty"`
	// LeaseEnds: per group of an ASYNC_MASTER, the Clock time (ms) its
	// newest lease from this leader ends, margin included: no election
	// of the group starts before it.
	LeaseEnds map[string]int64 `json:"leaseEnds,omitempty"`
}

// ReplicaLiveness is a replica's latest heartbeat as the leader holds it.
type ReplicaLiveness struct {
	ID          ReplicaID `json:"id"`
	Incarnation uint64    `json:"incarnation"`
	LastEpoch   uint32    `json:"lastEpoch"`
	LogEnd      int64     `json:"logEnd"`
	AgeMillis   int64     `json:"ageMillis"`
}

// Status answers this node's view (any node; the CLI asks the leader).
func (c *Controller) Status() (Status, error) {
	addr, id := c.raft.LeaderWithID()
	st := c.fsm.State()
	s := Status{NodeID: c.cfg.NodeID, Addr: c.cfg.Addr, State: c.raft.State().String(), LeaderID: string(id),
		LeaderAddr: string(addr), Term: c.raft.CurrentTerm(), AppliedIndex: st.Index, ClusterID: c.ClusterID()}
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return Status{}, fmt.Errorf("controller: configuration: %w", err)
	}
	for _, sv := range f.Configuration().Servers {
		if sv.Suffrage == raft.Voter {
			s.Voters = append(s.Voters, Voter{ID: string(sv.ID), Addr: string(sv.Address)})
		}
	}
	for _, g := range st.Groups {
		s.Groups = append(s.Groups, g)
	}
	slices.SortFunc(s.Groups, func(a, b *Group) int { return cmp.Compare(a.Name, b.Name) })
	now := c.cfg.Clock.Now()
	c.lead.mu.Lock()
	s.Acting = c.lead.leading
	if c.lead.leading {
		s.ElectionsFromMillis = c.lead.since.Add(c.cfg.DetectionPeriod).UnixMilli()
		for rid, h := range c.lead.live {
			s.Live = append(s.Live, ReplicaLiveness{ID: rid, Incarnation: h.incarnation, LastEpoch: h.lastEpoch,
				LogEnd: h.logEnd, AgeMillis: now.Sub(h.at).Milliseconds()})
		}
		for n := range c.lead.leases.grants {
			if _, end := c.lead.leases.leaseHeldLocked(n, now); !end.IsZero() {
				if s.LeaseEnds == nil {
					s.LeaseEnds = map[string]int64{}
				}
				s.LeaseEnds[n] = end.UnixMilli()
			}
		}
		if len(c.lead.noMaster) > 0 {
			s.WithoutMaster = map[string]int64{}
			for n, t := range c.lead.noMaster {
				s.WithoutMaster[n] = t.UnixMilli()
			}
		}
	}
	c.lead.mu.Unlock()
	slices.SortFunc(s.Live, func(a, b ReplicaLiveness) int { return cmp.Compare(a.ID, b.ID) })
	return s, nil
}

// WaitActing waits until this node acts as leader or ctx ends (tests and
// tools).
func (c *Controller) WaitActing(ctx context.Context) error {
	for !c.acting() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// Acting reports whether this node is the acting leader.
func (c *Controller) Acting() bool { return c.acting() }
