package controller

import (
	"cmp"
	"slices"
)

// ReplicaID is a replica's permanent id within the cluster, given once per
// store (store UUID) by RegisterReplica. 0 is never given: it means none.
type ReplicaID uint32

// Limits on what the state holds, so that the FSM stays in kilobytes and a
// snapshot stays far below what raft's trailing logs cover.
const (
	// MaxHistory is the number of election and audit entries kept per
	// group (the oldest are dropped).
	MaxHistory = 32
	// MaxReplicasPerGroup bounds the replicas a group may register.
	MaxReplicasPerGroup = 16
	// MaxGroups bounds the broker groups of a cluster.
	MaxGroups = 1024
	// MaxNameBytes bounds group names, store UUIDs, addresses and
	// operator notes in commands.
	MaxNameBytes = 256
)

// State is the whole replicated state: what the FSM holds and a snapshot
// writes. Groups are keyed by brokerName; its JSON encoding is
// deterministic (encoding/json sorts map keys; every slice is kept sorted
// or in log order).
type State struct {
	// ClusterID is fixed by the first InitCluster and never changes.
	ClusterID string `json:"clusterId"`
	// NextReplicaID is the id the next new store is given.
	NextReplicaID ReplicaID         `json:"nextReplicaId"`
	Groups        map[string]*Group `json:"groups"`
	// Index is the raft index of the last applied command (kept so that
	// two FSMs fed the same log can be compared byte for byte).
	Index uint64 `json:"index"`
}

// Group is the metadata of one broker group (brokerName).
type Group struct {
	Name     string                 `json:"name"`
	Replicas map[ReplicaID]*Replica `json:"replicas"`
	// MasterID is the master of MasterEpoch, 0 before the first election.
	MasterID    ReplicaID `json:"masterId"`
	MasterEpoch uint32    `json:"masterEpoch"`
	// InSync are the replicas the master's acknowledged writes are on,
	// sorted by id; the master is always a member once elected.
	InSync      []Member `json:"inSync"`
	InSyncEpoch uint32   `json:"inSyncEpoch"`
	// AllowUnclean lets the controller elect a replica outside InSync
	// when no member of it answers (operator command, audited).
	AllowUnclean bool `json:"allowUnclean"`
	// History is the newest MaxHistory elections and operator actions,
	// oldest first.
	History []Event `json:"history"`
}

// Replica is one store of a group: where its broker serves clients
// (remoting) and its slaves (HA), and the incarnation (a random number a
// broker process draws at start) of its latest registration.
type Replica struct {
	ID        ReplicaID `json:"id"`
	StoreUUID string    `json:"storeUuid"`
	Addr      string    `json:"addr"`
	HAAddr    string    `json:"haAddr"`
	// AMQPAddr is the broker's AMQP address ("": none), which its
	// group's other members name to AMQP clients when it is master.
	AMQPAddr    string `json:"amqpAddr,omitempty"`
	Incarnation uint64 `json:"incarnation"`
}

// Member is one in-sync replica at one incarnation.
type Member struct {
	ID          ReplicaID `json:"id"`
	Incarnation uint64    `json:"incarnation"`
}

// Fenced is what a replica answered the controller's fence: the newest
// epoch in its log and its log end.
type Fenced struct {
	ID        ReplicaID `json:"id"`
	LastEpoch uint32    `json:"lastEpoch"`
	LogEnd    int64     `json:"logEnd"`
}

// Event kinds in a group's history.
const (
	EventElect        = "elect"         // automatic election after the master went silent
	EventInitial      = "initial"       // first master of a group
	EventUnclean      = "unclean"       // election outside the in-sync set
	EventSwitchOver   = "switch-over"   // operator's graceful switch
	EventAllowUnclean = "allow-unclean" // operator changed AllowUnclean
)

// Event is one entry of a group's history.
type Event struct {
	Kind string `json:"kind"`
	// TimeMillis is the leader's wall clock when it proposed the command
	// (commands carry their time: Apply never reads a clock).
	TimeMillis  int64     `json:"timeMillis"`
	Epoch       uint32    `json:"epoch"`
	OldMasterID ReplicaID `json:"oldMasterId,omitempty"`
	MasterID    ReplicaID `json:"masterId,omitempty"`
	Fenced      []Fenced  `json:"fenced,omitempty"`
	Note        string    `json:"note,omitempty"`
}

// clone returns a deep copy (status readers get copies, never the FSM's
// own maps).
func (g *Group) clone() *Group {
	c := *g
	c.Replicas = make(map[ReplicaID]*Replica, len(g.Replicas))
	for id, r := range g.Replicas {
		rc := *r
		c.Replicas[id] = &rc
	}
	c.InSync = slices.Clone(g.InSync)
	c.History = make([]Event, len(g.History))
	for i, e := range g.History {
		e.Fenced = slices.Clone(e.Fenced)
		c.History[i] = e
	}
	return &c
}

func (s *State) clone() *State {
	c := *s
	c.Groups = make(map[string]*Group, len(s.Groups))
	for n, g := range s.Groups {
		c.Groups[n] = g.clone()
	}
	return &c
}

// inSync reports whether id is a member of the in-sync set.
func (g *Group) inSync(id ReplicaID) bool {
	for _, m := range g.InSync {
		if m.ID == id {
			return true
		}
	}
	return false
}

// replicaByStore returns the replica registered for a store UUID.
func (g *Group) replicaByStore(uuid string) *Replica {
	for _, r := range g.Replicas {
		if r.StoreUUID == uuid {
			return r
		}
	}
	return nil
}

func (g *Group) addEvent(e Event) {
	g.History = append(g.History, e)
	if n := len(g.History) - MaxHistory; n > 0 {
		g.History = slices.Delete(g.History, 0, n)
	}
}

// sortMembers keeps an in-sync set in id order.
func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int { return cmp.Compare(a.ID, b.ID) })
}
