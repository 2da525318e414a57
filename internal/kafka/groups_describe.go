package kafka

// DescribeGroups and ListGroups: the groups this coordinator has in memory
// (since its start), with Kafka's state names. A group that only has
// committed offsets (before a restart, or a RocketMQ group) is described
// as Dead with no members, as Kafka describes an unknown group; ListGroups
// lists the groups in memory only.

import (
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
)

func (st groupState) String() string {
	switch st {
	case groupPreparing:
		return "PreparingRebalance"
	case groupCompleting:
		return "CompletingRebalance"
	case groupStable:
		return "Stable"
	}
	return "Empty"
}

func (s *Server) describeGroups(req *kmsg.DescribeGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
	s.gmu.Lock()
	defer s.gmu.Unlock()
	for _, name := range req.Groups {
		rg := kmsg.NewDescribeGroupsResponseGroup()
		rg.Group, rg.State = name, "Dead"
		if cg := s.cg.groups[name]; cg != nil && len(cg.members) > 0 {
			rg.ErrorCode = errGroupIDUnknown // a consumer group: ConsumerGroupDescribe describes it
			rg.ErrorMessage = kmsg.StringPtr("Group " + name + " is not a classic group.")
		} else if g := s.groups[name]; g != nil {
			rg.State, rg.ProtocolType, rg.Protocol = g.state.String(), g.protocolType, g.protocol
			if g.state == groupPreparing {
				rg.Protocol = ""
			}
			ids := make([]string, 0, len(g.members))
			for id := range g.members {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			for _, id := range ids {
				m := g.members[id]
				rm := kmsg.NewDescribeGroupsResponseGroupMember()
				rm.MemberID, rm.ClientID, rm.ClientHost, rm.MemberAssignment = id, m.clientID, m.host, m.assignment
				rm.InstanceID = instancePtr(m.instanceID)
				for _, p := range m.protocols {
					if p.Name == g.protocol {
						rm.ProtocolMetadata = p.Metadata
					}
				}
				rg.Members = append(rg.Members, rm)
			}
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (s *Server) listGroups(req *kmsg.ListGroupsRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
	want, types := map[string]bool{}, map[string]bool{}
	for _, f := range req.StatesFilter {
		want[f] = true
	}
	for _, f := range req.TypesFilter { // v5: "classic", "consumer" (KIP-848)
		types[strings.ToLower(f)] = true
	}
	s.gmu.Lock()
	defer s.gmu.Unlock()
	names := make([]string, 0, len(s.groups))
	for name := range s.groups {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		g := s.groups[name]
		if len(want) > 0 && !want[g.state.String()] || len(types) > 0 && !types["classic"] {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState, rg.GroupType = name, g.protocolType, g.state.String(), "classic"
		resp.Groups = append(resp.Groups, rg)
	}
	if len(types) == 0 || types["consumer"] {
		s.listConsumerGroups(resp, want) // group848_describe.go
	}
	return resp
}
