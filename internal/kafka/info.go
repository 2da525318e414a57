package kafka

// Info: the door's consumer groups (with their members' assignments
// decoded) and open connections, for the operator's tools (the broker's
// LIST_KAFKA, `keel kafka`, the console) and for the members of a Kafka
// group in the RocketMQ admin answers (GroupMembers).

import (
	"sort"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/kafkainfo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// connStats is what Info reports of one connection; its reader updates it.
type connStats struct {
	since    time.Time
	requests atomic.Int64
	clientID atomic.Pointer[string] // of the last request that named one
	user     atomic.Pointer[string] // the SASL account, once authenticated
}

// seen counts a request from clientID on a connection authenticated as
// user ("": not).
func (c *connStats) seen(clientID, user string) {
	c.requests.Add(1)
	if p := c.clientID.Load(); clientID != "" && (p == nil || *p != clientID) {
		c.clientID.Store(&clientID)
	}
	if user != "" && c.user.Load() == nil {
		c.user.Store(&user)
	}
}

// Info returns a snapshot of the groups and connections, sorted.
func (s *Server) Info() kafkainfo.Info {
	info := kafkainfo.Info{Groups: s.groupInfos(""), Connections: []kafkainfo.Connection{}}
	s.mu.Lock()
	for c, st := range s.conns {
		ci := kafkainfo.Connection{Remote: c.RemoteAddr().String(), SinceMs: st.since.UnixMilli(), Requests: st.requests.Load()}
		if p := st.clientID.Load(); p != nil {
			ci.ClientID = *p
		}
		if p := st.user.Load(); p != nil {
			ci.User = *p
		}
		info.Connections = append(info.Connections, ci)
	}
	s.mu.Unlock()
	sort.Slice(info.Connections, func(i, j int) bool { return info.Connections[i].Remote < info.Connections[j].Remote })
	return info
}

// GroupMembers returns the members of the Kafka group name (nil: none, or
// not a group of this door).
func (s *Server) GroupMembers(name string) []kafkainfo.Member {
	gs := s.groupInfos(name)
	if len(gs) == 0 {
		return nil
	}
	return gs[0].Members
}

// GroupCounts returns the groups with a member online and their members.
func (s *Server) GroupCounts() (groups, members int) {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	for _, g := range s.groups {
		if n := len(g.members); n > 0 {
			groups++
			members += n
		}
	}
	for _, g := range s.cg.groups { // KIP-848 groups (group848.go)
		if n := len(g.members); n > 0 {
			groups++
			members += n
		}
	}
	return groups, members
}

// groupInfos describes every group, or only the one named only.
func (s *Server) groupInfos(only string) []kafkainfo.Group {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	out := []kafkainfo.Group{}
	for name, g := range s.groups {
		if only != "" && name != only {
			continue
		}
		gi := kafkainfo.Group{Name: name, State: g.state.String(), ProtocolType: g.protocolType, Protocol: g.protocol,
			Generation: g.generation, Leader: g.leader, Members: []kafkainfo.Member{}}
		for id, m := range g.members {
			mi := kafkainfo.Member{MemberID: id, ClientID: m.clientID, Host: m.host, Assignment: []kafkainfo.Assignment{}}
			if g.protocolType == "consumer" {
				mi.Assignment = decodeAssignment(m.assignment)
			}
			gi.Members = append(gi.Members, mi)
		}
		sort.Slice(gi.Members, func(i, j int) bool { return gi.Members[i].MemberID < gi.Members[j].MemberID })
		out = append(out, gi)
	}
	out = append(out, s.consumerGroupInfos(only)...) // group848_describe.go
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// decodeAssignment reads a consumer protocol assignment (what the leader
// sent in SyncGroup); an undecodable one is reported empty.
func decodeAssignment(b []byte) []kafkainfo.Assignment {
	out := []kafkainfo.Assignment{}
	if len(b) == 0 {
		return out
	}
	var a kmsg.ConsumerMemberAssignment
	if a.ReadFrom(b) != nil {
		return out
	}
	for _, t := range a.Topics {
		ps := append([]int32(nil), t.Partitions...)
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		out = append(out, kafkainfo.Assignment{Topic: t.Topic, Partitions: ps})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Topic < out[j].Topic })
	return out
}
