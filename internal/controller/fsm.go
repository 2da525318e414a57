package controller

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/hashicorp/raft"
)

// FSM is the raft state machine over State. Apply is deterministic: it
// reads nothing but the state and the command (no clock, no I/O, no map
// iteration order reaching the state), so every voter that applies the
// same log holds byte-identical state (TestFSMDeterministic).
//
// raft calls Apply, Snapshot and Restore from one goroutine; readers
// (Snapshot's copy, status, the elector) take mu's read side.
type FSM struct {
	mu    sync.RWMutex
	state *State
}

// NewFSM returns an FSM with an empty state.
func NewFSM() *FSM { return &FSM{state: emptyState()} }

func emptyState() *State {
	return &State{NextReplicaID: 1, Groups: map[string]*Group{}}
}

// Apply applies one committed log entry and returns a *Result.
func (f *FSM) Apply(l *raft.Log) any {
	c, err := decodeCommand(l.Data)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state.Index = l.Index
	if err != nil {
		return &Result{Err: err}
	}
	return f.state.apply(c)
}

// State returns a copy of the whole state.
func (f *FSM) State() *State {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.clone()
}

// Group returns a copy of one group, or nil.
func (f *FSM) Group(name string) *Group {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if g := f.state.Groups[name]; g != nil {
		return g.clone()
	}
	return nil
}

// ClusterID is the cluster's identity ("" before InitCluster is applied).
func (f *FSM) ClusterID() string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.ClusterID
}

// Snapshot encodes the state now; raft persists the bytes while Apply
// goes on.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	b, err := json.Marshal(f.state)
	f.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("controller: encode snapshot: %w", err)
	}
	return snapshot(b), nil
}

// maxSnapshotBytes bounds what Restore reads: far above what MaxGroups
// groups of MaxReplicasPerGroup replicas and MaxHistory events encode to.
const maxSnapshotBytes = 64 << 20

// Restore replaces the state with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxSnapshotBytes+1))
	if err != nil {
		return fmt.Errorf("controller: read snapshot: %w", err)
	}
	if len(b) > maxSnapshotBytes {
		return fmt.Errorf("controller: snapshot larger than %d bytes", maxSnapshotBytes)
	}
	s := emptyState()
	if err := json.Unmarshal(b, s); err != nil {
		return fmt.Errorf("controller: decode snapshot: %w", err)
	}
	if err := s.check(); err != nil {
		return fmt.Errorf("controller: snapshot: %w", err)
	}
	f.mu.Lock()
	f.state = s
	f.mu.Unlock()
	return nil
}

// check verifies what Apply relies on in a decoded state: no nil group
// or replica, keys matching ids and names, the master and every in-sync
// member registered.
func (s *State) check() error {
	if s.Groups == nil {
		s.Groups = map[string]*Group{}
	}
	for name, g := range s.Groups {
		if g == nil || g.Name != name {
			return fmt.Errorf("group %q malformed", name)
		}
		if g.Replicas == nil {
			g.Replicas = map[ReplicaID]*Replica{}
		}
		for id, r := range g.Replicas {
			if r == nil || r.ID != id || id == 0 || id >= s.NextReplicaID {
				return fmt.Errorf("group %q: replica %d malformed", name, id)
			}
		}
		if g.MasterID != 0 && g.Replicas[g.MasterID] == nil {
			return fmt.Errorf("group %q: master %d not registered", name, g.MasterID)
		}
		for _, m := range g.InSync {
			if g.Replicas[m.ID] == nil {
				return fmt.Errorf("group %q: in-sync member %d not registered", name, m.ID)
			}
		}
	}
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return fmt.Errorf("controller: write snapshot: %w", err)
	}
	return sink.Close()
}

func (s snapshot) Release() {}

// apply dispatches one decoded command.
func (s *State) apply(c *Command) *Result {
	switch {
	case c.Init != nil:
		return s.applyInit(c.Init)
	case s.ClusterID == "":
		return &Result{Err: ErrNotInitialized}
	case c.Register != nil:
		return s.applyRegister(c.Register)
	case c.Elect != nil:
		return s.applyElect(c.Elect, c.TimeMillis)
	case c.AlterInSync != nil:
		return s.applyAlterInSync(c.AlterInSync)
	default:
		return s.applyAllowUnclean(c.AllowUnclean, c.TimeMillis)
	}
}

func (s *State) applyInit(c *InitCluster) *Result {
	if err := validName("cluster id", c.ClusterID, true); err != nil {
		return &Result{Err: err}
	}
	switch s.ClusterID {
	case "":
		s.ClusterID = c.ClusterID
	case c.ClusterID:
	default:
		return &Result{Err: fmt.Errorf("%w: cluster is %s, command says %s", ErrClusterMismatch, s.ClusterID, c.ClusterID)}
	}
	return &Result{}
}

func (s *State) applyRegister(c *RegisterReplica) *Result {
	for _, v := range [][3]any{{"group", c.Group, true}, {"store uuid", c.StoreUUID, true}, {"addr", c.Addr, true}, {"ha addr", c.HAAddr, false}, {"amqp addr", c.AMQPAddr, false}} {
		if err := validName(v[0].(string), v[1].(string), v[2].(bool)); err != nil {
			return &Result{Err: err}
		}
	}
	if c.ClusterID != s.ClusterID {
		return &Result{Err: fmt.Errorf("%w: cluster is %s, broker says %q", ErrClusterMismatch, s.ClusterID, c.ClusterID)}
	}
	for name, g := range s.Groups {
		if name != c.Group && g.replicaByStore(c.StoreUUID) != nil {
			return &Result{Err: fmt.Errorf("%w: store %s is in group %s", ErrStoreInOtherGroup, c.StoreUUID, name)}
		}
	}
	g := s.Groups[c.Group]
	if g == nil {
		if len(s.Groups) >= MaxGroups {
			return &Result{Err: fmt.Errorf("%w: %d groups", ErrLimit, MaxGroups)}
		}
		g = &Group{Name: c.Group, Replicas: map[ReplicaID]*Replica{}}
	}
	r := g.replicaByStore(c.StoreUUID)
	switch {
	case r != nil && c.ReplicaID != 0 && c.ReplicaID != r.ID:
		return &Result{Err: fmt.Errorf("%w: store %s is replica %d, broker says %d", ErrReplicaIDMismatch, c.StoreUUID, r.ID, c.ReplicaID), Group: g.clone()}
	case r == nil && c.ReplicaID != 0:
		// The broker holds an id the controller never gave this store (a
		// controller state from another cluster, or a copied store).
		return &Result{Err: fmt.Errorf("%w: store %s is not registered, broker says replica %d", ErrReplicaIDMismatch, c.StoreUUID, c.ReplicaID)}
	case r == nil:
		if len(g.Replicas) >= MaxReplicasPerGroup {
			return &Result{Err: fmt.Errorf("%w: %d replicas in group %s", ErrLimit, MaxReplicasPerGroup, c.Group)}
		}
		r = &Replica{ID: s.NextReplicaID, StoreUUID: c.StoreUUID}
		s.NextReplicaID++
		g.Replicas[r.ID] = r
	}
	s.Groups[c.Group] = g
	r.Addr, r.HAAddr, r.AMQPAddr, r.Incarnation = c.Addr, c.HAAddr, c.AMQPAddr, c.Incarnation
	return &Result{Replica: r.ID, Group: g.clone()}
}

func (s *State) applyElect(c *ElectMaster, now int64) *Result {
	if err := validName("note", c.Note, false); err != nil {
		return &Result{Err: err}
	}
	g := s.Groups[c.Group]
	if g == nil {
		return &Result{Err: fmt.Errorf("%w: %q", ErrUnknownGroup, c.Group)}
	}
	if g.MasterEpoch == c.ExpectEpoch+1 && g.MasterID == c.NewMaster {
		return &Result{Group: g.clone()} // a retry of a command already applied
	}
	if g.MasterEpoch != c.ExpectEpoch {
		return &Result{Err: fmt.Errorf("%w: group %s is at epoch %d, command expects %d", ErrStaleEpoch, g.Name, g.MasterEpoch, c.ExpectEpoch), Group: g.clone()}
	}
	nm := g.Replicas[c.NewMaster]
	if nm == nil {
		return &Result{Err: fmt.Errorf("%w: %d in group %s", ErrUnknownReplica, c.NewMaster, g.Name), Group: g.clone()}
	}
	switch c.Kind {
	case EventElect, EventSwitchOver:
		if !g.inSync(c.NewMaster) {
			return &Result{Err: fmt.Errorf("%w: replica %d of group %s", ErrNotInSync, c.NewMaster, g.Name), Group: g.clone()}
		}
	case EventInitial:
		if g.MasterEpoch != 0 {
			return &Result{Err: fmt.Errorf("%w: group %s already had a master", ErrStaleEpoch, g.Name), Group: g.clone()}
		}
	case EventUnclean:
	default:
		return &Result{Err: fmt.Errorf("%w: election kind %q", ErrInvalidCommand, c.Kind)}
	}
	old := g.MasterID
	g.MasterID, g.MasterEpoch = c.NewMaster, g.MasterEpoch+1
	isr := []Member{{ID: nm.ID, Incarnation: nm.Incarnation}}
	if c.Kind != EventUnclean {
		// The other members hold every acknowledged write too; the new
		// master removes those that do not follow it (AlterInSync). The
		// old master leaves the set, except in a switch-over: fenced with
		// its whole log, it holds every write as well.
		for _, m := range g.InSync {
			if m.ID != nm.ID && (m.ID != old || c.Kind == EventSwitchOver) {
				isr = append(isr, m)
			}
		}
	}
	sortMembers(isr)
	g.InSync, g.InSyncEpoch = isr, g.InSyncEpoch+1
	fenced := slices.Clone(c.Fenced)
	slices.SortFunc(fenced, func(a, b Fenced) int { return cmp.Compare(a.ID, b.ID) })
	g.addEvent(Event{Kind: c.Kind, TimeMillis: now, Epoch: g.MasterEpoch, OldMasterID: old, MasterID: nm.ID, Fenced: fenced, Note: c.Note})
	return &Result{Group: g.clone()}
}

func (s *State) applyAlterInSync(c *AlterInSync) *Result {
	g := s.Groups[c.Group]
	if g == nil {
		return &Result{Err: fmt.Errorf("%w: %q", ErrUnknownGroup, c.Group)}
	}
	isr := slices.Clone(c.InSync)
	sortMembers(isr)
	if g.MasterEpoch == c.MasterEpoch && g.InSyncEpoch == c.ExpectInSyncEpoch+1 && slices.Equal(g.InSync, isr) {
		return &Result{Group: g.clone()} // a retry of a command already applied
	}
	if c.MasterEpoch != g.MasterEpoch || c.MasterID != g.MasterID || g.MasterID == 0 {
		return &Result{Err: fmt.Errorf("%w: group %s has master %d at epoch %d, command from %d at epoch %d",
			ErrNotMaster, g.Name, g.MasterID, g.MasterEpoch, c.MasterID, c.MasterEpoch), Group: g.clone()}
	}
	if c.MasterIncarnation != g.Replicas[g.MasterID].Incarnation {
		return &Result{Err: fmt.Errorf("%w: master %d of group %s", ErrStaleIncarnation, g.MasterID, g.Name), Group: g.clone()}
	}
	if c.ExpectInSyncEpoch != g.InSyncEpoch {
		return &Result{Err: fmt.Errorf("%w: group %s in-sync epoch %d, command expects %d", ErrStaleInSyncEpoch, g.Name, g.InSyncEpoch, c.ExpectInSyncEpoch), Group: g.clone()}
	}
	hasMaster := false
	for i, m := range isr {
		if i > 0 && isr[i-1].ID == m.ID {
			return &Result{Err: fmt.Errorf("%w: replica %d twice", ErrInvalidCommand, m.ID), Group: g.clone()}
		}
		r := g.Replicas[m.ID]
		if r == nil {
			return &Result{Err: fmt.Errorf("%w: %d in group %s", ErrUnknownReplica, m.ID, g.Name), Group: g.clone()}
		}
		hasMaster = hasMaster || m.ID == g.MasterID
		if !slices.Contains(g.InSync, m) && m.Incarnation != r.Incarnation {
			return &Result{Err: fmt.Errorf("%w: replica %d added at incarnation %d, registered %d", ErrStaleIncarnation, m.ID, m.Incarnation, r.Incarnation), Group: g.clone()}
		}
	}
	if !hasMaster {
		return &Result{Err: fmt.Errorf("%w: the in-sync set must hold the master", ErrInvalidCommand), Group: g.clone()}
	}
	g.InSync, g.InSyncEpoch = isr, g.InSyncEpoch+1
	return &Result{Group: g.clone()}
}

func (s *State) applyAllowUnclean(c *AllowUnclean, now int64) *Result {
	if err := validName("note", c.Note, false); err != nil {
		return &Result{Err: err}
	}
	g := s.Groups[c.Group]
	if g == nil {
		return &Result{Err: fmt.Errorf("%w: %q", ErrUnknownGroup, c.Group)}
	}
	if g.AllowUnclean != c.Allow {
		g.AllowUnclean = c.Allow
		note := "unclean elections forbidden"
		if c.Allow {
			note = "unclean elections allowed"
		}
		if c.Note != "" {
			note += ": " + c.Note
		}
		g.addEvent(Event{Kind: EventAllowUnclean, TimeMillis: now, Epoch: g.MasterEpoch, Note: note})
	}
	return &Result{Group: g.clone()}
}
