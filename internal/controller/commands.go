package controller

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Command is one entry of the raft log: exactly one of its bodies is set.
// Every body is a compare-and-set that Apply checks against the state, so
// a command re-sent after an ambiguous raft error (ErrLeadershipLost, a
// timeout) either finds the state it asked for (success) or a state that
// moved on (a rejection), never a second effect.
type Command struct {
	// TimeMillis is the proposer's wall clock, for the history; Apply
	// never reads a clock.
	TimeMillis   int64            `json:"timeMillis"`
	Init         *InitCluster     `json:"init,omitempty"`
	Register     *RegisterReplica `json:"register,omitempty"`
	Elect        *ElectMaster     `json:"elect,omitempty"`
	AlterInSync  *AlterInSync     `json:"alterInSync,omitempty"`
	AllowUnclean *AllowUnclean    `json:"allowUnclean,omitempty"`
}

// InitCluster fixes the cluster identity. It succeeds once; repeating it
// with the same id is a no-op, with another id an ErrClusterMismatch.
type InitCluster struct {
	ClusterID string `json:"clusterId"`
}

// RegisterReplica gives a store its permanent replica id (or finds the one
// it has) and records the broker's current addresses and incarnation.
// ReplicaID is the id the broker already holds (0 on its first
// registration): a mismatch is refused.
type RegisterReplica struct {
	ClusterID   string    `json:"clusterId"`
	Group       string    `json:"group"`
	StoreUUID   string    `json:"storeUuid"`
	ReplicaID   ReplicaID `json:"replicaId,omitempty"`
	Addr        string    `json:"addr"`
	HAAddr      string    `json:"haAddr"`
	AMQPAddr    string    `json:"amqpAddr,omitempty"`
	Incarnation uint64    `json:"incarnation"`
}

// ElectMaster makes NewMaster the master at ExpectEpoch+1, if the group is
// still at ExpectEpoch. NewMaster must be in the in-sync set (any replica
// before a group's first election), unless Kind is EventUnclean. Fenced
// are the candidates' answers, kept in the history.
type ElectMaster struct {
	Group       string    `json:"group"`
	ExpectEpoch uint32    `json:"expectEpoch"`
	NewMaster   ReplicaID `json:"newMaster"`
	Kind        string    `json:"kind"` // EventElect, EventInitial, EventUnclean or EventSwitchOver
	Fenced      []Fenced  `json:"fenced,omitempty"`
	Note        string    `json:"note,omitempty"`
}

// AlterInSync replaces the in-sync set. Only the master of MasterEpoch
// (at its registered incarnation) proposes it, against ExpectInSyncEpoch;
// every added member must carry its registered incarnation.
type AlterInSync struct {
	Group             string    `json:"group"`
	MasterID          ReplicaID `json:"masterId"`
	MasterIncarnation uint64    `json:"masterIncarnation"`
	MasterEpoch       uint32    `json:"masterEpoch"`
	ExpectInSyncEpoch uint32    `json:"expectInSyncEpoch"`
	InSync            []Member  `json:"inSync"`
}

// AllowUnclean is the operator's switch for elections outside the in-sync
// set of one group (audited in its history).
type AllowUnclean struct {
	Group string `json:"group"`
	Allow bool   `json:"allow"`
	Note  string `json:"note,omitempty"`
}

// Rejections. Apply returns them wrapped with details; test with errors.Is.
var (
	ErrClusterMismatch   = errors.New("controller: cluster id mismatch")
	ErrNotInitialized    = errors.New("controller: cluster not initialized")
	ErrStaleEpoch        = errors.New("controller: stale master epoch")
	ErrStaleInSyncEpoch  = errors.New("controller: stale in-sync epoch")
	ErrNotMaster         = errors.New("controller: not the master")
	ErrNotInSync         = errors.New("controller: not in the in-sync set")
	ErrUnknownGroup      = errors.New("controller: unknown group")
	ErrUnknownReplica    = errors.New("controller: unknown replica")
	ErrStaleIncarnation  = errors.New("controller: stale incarnation")
	ErrReplicaIDMismatch = errors.New("controller: replica id mismatch")
	ErrStoreInOtherGroup = errors.New("controller: store registered in another group")
	ErrLimit             = errors.New("controller: limit reached")
	ErrInvalidCommand    = errors.New("controller: invalid command")
)

// Result is what Apply returns for a command (raft's ApplyFuture.Response).
type Result struct {
	Err error
	// Replica is the id RegisterReplica gave or found.
	Replica ReplicaID
	// Group is a copy of the group after the command (nil on InitCluster
	// and on rejections of an unknown group).
	Group *Group
}

func encodeCommand(c *Command) ([]byte, error) { return json.Marshal(c) }

// decodeCommand decodes a log entry; anything but exactly one body is
// invalid.
func decodeCommand(b []byte) (*Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	n := 0
	for _, set := range []bool{c.Init != nil, c.Register != nil, c.Elect != nil, c.AlterInSync != nil, c.AllowUnclean != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("%w: %d bodies", ErrInvalidCommand, n)
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// validate checks the sizes of a command's fields, so that what reaches
// the raft log is bounded (the leader checks before proposing; Apply
// checks again).
func (c *Command) validate() error {
	var names []string
	lists := 0
	switch {
	case c.Init != nil:
		names = []string{c.Init.ClusterID}
	case c.Register != nil:
		r := c.Register
		names = []string{r.ClusterID, r.Group, r.StoreUUID, r.Addr, r.HAAddr, r.AMQPAddr}
	case c.Elect != nil:
		names, lists = []string{c.Elect.Group, c.Elect.Kind, c.Elect.Note}, len(c.Elect.Fenced)
	case c.AlterInSync != nil:
		names, lists = []string{c.AlterInSync.Group}, len(c.AlterInSync.InSync)
	case c.AllowUnclean != nil:
		names = []string{c.AllowUnclean.Group, c.AllowUnclean.Note}
	}
	for _, s := range names {
		if len(s) > MaxNameBytes {
			return fmt.Errorf("%w: a field longer than %d bytes", ErrInvalidCommand, MaxNameBytes)
		}
	}
	if lists > MaxReplicasPerGroup {
		return fmt.Errorf("%w: %d replicas listed, at most %d", ErrInvalidCommand, lists, MaxReplicasPerGroup)
	}
	return nil
}

// validName checks a name or address carried by a command.
func validName(what, s string, required bool) error {
	if required && s == "" {
		return fmt.Errorf("%w: empty %s", ErrInvalidCommand, what)
	}
	if len(s) > MaxNameBytes {
		return fmt.Errorf("%w: %s longer than %d bytes", ErrInvalidCommand, what, MaxNameBytes)
	}
	return nil
}
