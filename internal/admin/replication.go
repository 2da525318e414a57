package admin

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Replication state as a group member reports it in its runtime info
// (the keelReplication* entries, docs/replication.md): what `keel
// cluster` and the console show.

// ReplicationState is one broker's replication state.
type ReplicationState struct {
	Role            string `json:"role"` // SYNC_MASTER, ASYNC_MASTER or SLAVE
	Epoch           uint32 `json:"epoch"`
	WrittenOffset   int64  `json:"writtenOffset"`   // its log end
	ConfirmedOffset int64  `json:"confirmedOffset"` // a slave: the master's, as last heard
	// Master only.
	InSyncReplicas    int            `json:"inSyncReplicas,omitempty"`
	MinInSyncReplicas int            `json:"minInSyncReplicas,omitempty"`
	Replicas          []ReplicaState `json:"replicas,omitempty"`
	// Slave only.
	MasterAddress string    `json:"masterAddress,omitempty"`
	Connected     bool      `json:"connected,omitempty"`
	LastContact   time.Time `json:"lastContact,omitzero"`
}

// ReplicaState is a replica connected to a master, as the master sees it.
type ReplicaState struct {
	BrokerID    int64     `json:"brokerId"`
	Address     string    `json:"address"` // of its replication connection
	AckedOffset int64     `json:"ackedOffset"`
	LagBytes    int64     `json:"lagBytes"`
	LagSeconds  float64   `json:"lagSeconds"` // -1: unknown
	InSync      bool      `json:"inSync"`
	LastAck     time.Time `json:"lastAck,omitzero"`
}

// InSyncShort reports whether a SYNC_MASTER has fewer copies in sync than
// it needs to take sends.
func (s ReplicationState) InSyncShort() bool {
	return s.Role == "SYNC_MASTER" && s.InSyncReplicas < s.MinInSyncReplicas
}

// Replica returns the master's entry for replica id.
func (s ReplicationState) Replica(id int64) (ReplicaState, bool) {
	for _, r := range s.Replicas {
		if r.BrokerID == id {
			return r, true
		}
	}
	return ReplicaState{}, false
}

// ParseReplication reads the replication entries of a runtime-info table;
// false if the broker is not a group member (or predates them).
func ParseReplication(info map[string]string) (ReplicationState, bool) {
	const p = "keelReplication"
	role := info[p+"Role"]
	if role == "" {
		return ReplicationState{}, false
	}
	i64 := func(k string) int64 { v, _ := strconv.ParseInt(info[k], 10, 64); return v }
	ms := func(k string) time.Time {
		if v := i64(k); v > 0 {
			return time.UnixMilli(v)
		}
		return time.Time{}
	}
	s := ReplicationState{Role: role, Epoch: uint32(i64(p + "Epoch")), WrittenOffset: i64(p + "WrittenOffset"),
		ConfirmedOffset: i64(p + "ConfirmedOffset"), InSyncReplicas: int(i64(p + "InSyncReplicas")),
		MinInSyncReplicas: int(i64(p + "MinInSyncReplicas")), MasterAddress: info[p+"MasterAddress"],
		Connected: info[p+"Connected"] == "true", LastContact: ms(p + "LastContactTimestamp")}
	for _, id := range strings.Split(info[p+"Replicas"], ",") {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			continue
		}
		k := p + "Replica" + id
		lag, err := strconv.ParseFloat(info[k+"LagSeconds"], 64)
		if err != nil {
			lag = -1
		}
		s.Replicas = append(s.Replicas, ReplicaState{BrokerID: n, Address: info[k+"Address"], AckedOffset: i64(k + "AckedOffset"),
			LagBytes: i64(k + "LagBytes"), LagSeconds: lag, InSync: info[k+"InSync"] == "true", LastAck: ms(k + "LastAckTimestamp")})
	}
	return s, true
}

// BrokerGroup is the brokers registered under one brokerName: a master
// (id 0) and its slaves.
type BrokerGroup struct {
	Cluster string        `json:"cluster"`
	Name    string        `json:"brokerName"`
	Members []GroupMember `json:"members"` // by broker id
	// Unregistered are replicas connected to the master that are not
	// registered with the NameServers (their registration failed, or they
	// register elsewhere).
	Unregistered []ReplicaState `json:"unregistered,omitempty"`
	// MasterDown is set when the group has slaves but no master that
	// answers.
	MasterDown *MasterDown `json:"masterDown,omitempty"`
}

// MasterDown is what is known of a group's master that is not registered
// with the NameServers (its registration expired: it stopped, or cannot
// reach them) or does not answer, from the group's slaves.
type MasterDown struct {
	// Registered: it is registered but did not answer (its member's Err).
	Registered bool `json:"registered"`
	// Address is its replication address as its slaves follow it ("" if
	// none says).
	Address string `json:"address,omitempty"`
	// LastHeard is the latest contact a slave had with it: it has been
	// unreachable since. Zero: no slave heard it since it started.
	LastHeard time.Time `json:"lastHeard,omitzero"`
}

// GroupMember is one broker of a group with its replication state (nil
// when it is not a group member or did not answer: Err says which).
type GroupMember struct {
	Broker
	Replication *ReplicationState `json:"replication,omitempty"`
	// AsReplica is the master's view of a slave (nil for the master, or a
	// slave not connected to it).
	AsReplica *ReplicaState `json:"asReplica,omitempty"`
	Err       string        `json:"error,omitempty"`
}

// Master returns the group's master (id 0), if registered.
func (g BrokerGroup) Master() (GroupMember, bool) {
	for _, m := range g.Members {
		if m.ID == 0 {
			return m, true
		}
	}
	return GroupMember{}, false
}

// BrokerGroups asks every registered broker for its runtime information and
// returns the brokers by group (brokerName), sorted by name and id.
func (c *Client) BrokerGroups(ctx context.Context) ([]BrokerGroup, error) {
	rs, err := c.Runtime(ctx)
	if err != nil {
		return nil, err
	}
	return GroupRuntime(rs), nil
}

// GroupRuntime arranges runtime answers (sorted by name and id, as Runtime
// returns them) by broker group.
func GroupRuntime(rs []BrokerRuntime) []BrokerGroup {
	var out []BrokerGroup
	for _, r := range rs {
		if len(out) == 0 || out[len(out)-1].Name != r.Name {
			out = append(out, BrokerGroup{Cluster: r.Cluster, Name: r.Name})
		}
		m := GroupMember{Broker: r.Broker, Err: r.Err}
		if s, ok := ParseReplication(r.Info); ok {
			m.Replication = &s
		}
		g := &out[len(out)-1]
		g.Members = append(g.Members, m)
	}
	for i := range out {
		out[i].joinMasterView()
		out[i].MasterDown = out[i].masterDown()
	}
	return out
}

// masterDown says what the slaves know of a master that is missing or
// does not answer; nil if the master answers or the group has no slave.
func (g BrokerGroup) masterDown() *MasterDown {
	master, ok := g.Master()
	if ok && master.Err == "" || len(g.Members) == 0 || ok && len(g.Members) == 1 {
		return nil
	}
	d := &MasterDown{Registered: ok}
	for _, m := range g.Members {
		s := m.Replication
		if m.ID == 0 || s == nil || s.Role != "SLAVE" {
			continue
		}
		if d.Address == "" {
			d.Address = s.MasterAddress
		}
		if s.LastContact.After(d.LastHeard) {
			d.LastHeard = s.LastContact
		}
	}
	return d
}

// joinMasterView gives each slave the master's view of it and lists the
// connected replicas that are not registered.
func (g *BrokerGroup) joinMasterView() {
	master, ok := g.Master()
	if !ok || master.Replication == nil {
		return
	}
	seen := map[int64]bool{}
	for i := range g.Members {
		m := &g.Members[i]
		seen[m.ID] = true
		if r, ok := master.Replication.Replica(m.ID); ok && m.ID != 0 {
			m.AsReplica = &r
		}
	}
	for _, r := range master.Replication.Replicas {
		if !seen[r.BrokerID] {
			g.Unregistered = append(g.Unregistered, r)
		}
	}
}
