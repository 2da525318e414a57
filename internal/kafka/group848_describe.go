package kafka

// ConsumerGroupDescribe (key 69): the consumer groups (KIP-848) this
// coordinator has in memory, with Kafka's state names: Empty (no members),
// Reconciling (a member is not yet at the target epoch or still has
// partitions to revoke or to receive) and Stable. A group id that is not a
// consumer group (a classic group, or unknown) is GROUP_ID_NOT_FOUND.

import (
	"fmt"
	"maps"
	"slices"

	"github.com/keelmq/keel/internal/kafkainfo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// state is the group's state in Kafka's names. gmu is held.
func (g *cgroup) state() string {
	if len(g.members) == 0 {
		return "Empty"
	}
	for _, m := range g.members {
		if m.epoch != g.targetEpoch && m.epoch != -2 || len(m.revoking) > 0 || len(m.assigned) != len(g.target[m.id]) {
			return "Reconciling"
		}
	}
	return "Stable"
}

func (s *Server) consumerGroupDescribe(req *kmsg.ConsumerGroupDescribeRequest) kmsg.Response {
	resp := req.ResponseKind().(*kmsg.ConsumerGroupDescribeResponse)
	s.gmu.Lock()
	defer s.gmu.Unlock()
	for _, name := range req.Groups {
		rg := kmsg.NewConsumerGroupDescribeResponseGroup()
		rg.Group = name
		g := s.cg.groups[name]
		if g == nil {
			rg.ErrorCode = errGroupIDUnknown
			rg.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("Group %s not found.", name))
			if cg := s.groups[name]; cg != nil && len(cg.members) > 0 {
				rg.ErrorMessage = kmsg.StringPtr(fmt.Sprintf("Group %s is not a consumer group.", name))
			}
			resp.Groups = append(resp.Groups, rg)
			continue
		}
		rg.State, rg.Epoch, rg.AssignmentEpoch, rg.AssignorName = g.state(), g.epoch, g.targetEpoch, g.assignor
		for _, id := range slices.Sorted(maps.Keys(g.members)) {
			rg.Members = append(rg.Members, g.describeMember(g.members[id], req.Version))
		}
		resp.Groups = append(resp.Groups, rg)
	}
	return resp
}

func (g *cgroup) describeMember(m *cgMember, version int16) kmsg.ConsumerGroupDescribeResponseGroupMember {
	rm := kmsg.NewConsumerGroupDescribeResponseGroupMember()
	rm.MemberID, rm.InstanceID, rm.MemberEpoch = m.id, instancePtr(m.instanceID), m.epoch
	if m.rackID != "" {
		rm.RackID = kmsg.StringPtr(m.rackID)
	}
	rm.ClientID, rm.ClientHost = m.clientID, m.host
	rm.SubscribedTopics = slicesNonNil(slices.Clone(m.topics))
	if m.regex != "" {
		rm.SubscribedTopicRegex = kmsg.StringPtr(m.regex)
	}
	rm.Assignment = describeAssignment(m.assigned)
	rm.TargetAssignment = describeAssignment(g.target[m.id])
	if version >= 1 {
		rm.MemberType = 1 // consumer (the member joined by ConsumerGroupHeartbeat)
	}
	return rm
}

func describeAssignment[V any](set map[tpKey]V) kmsg.Assignment {
	a := kmsg.NewAssignment()
	a.TopicPartitions = []kmsg.AssignmentTopicPartition{}
	for _, t := range groupByTopic(set) {
		at := kmsg.NewAssignmentTopicPartition()
		at.TopicID, at.Topic, at.Partitions = topicID(t.topic), t.topic, t.parts
		a.TopicPartitions = append(a.TopicPartitions, at)
	}
	return a
}

// listConsumerGroups adds the consumer groups to a ListGroups answer (in
// name order, states filtered as the request asks). gmu is held.
func (s *Server) listConsumerGroups(resp *kmsg.ListGroupsResponse, want map[string]bool) {
	for _, name := range slices.Sorted(maps.Keys(s.cg.groups)) {
		g := s.cg.groups[name]
		st := g.state()
		if len(want) > 0 && !want[st] {
			continue
		}
		rg := kmsg.NewListGroupsResponseGroup()
		rg.Group, rg.ProtocolType, rg.GroupState, rg.GroupType = name, "consumer", st, "consumer"
		resp.Groups = append(resp.Groups, rg)
	}
}

// consumerGroupInfos describes the consumer groups (or only the one named
// only) for Info: the assignor as the protocol, the group epoch as the
// generation, each member's assigned partitions. gmu is held.
func (s *Server) consumerGroupInfos(only string) []kafkainfo.Group {
	var out []kafkainfo.Group
	for name, g := range s.cg.groups {
		if only != "" && name != only {
			continue
		}
		gi := kafkainfo.Group{Name: name, State: g.state(), ProtocolType: "consumer", Protocol: g.assignor,
			Generation: g.epoch, Members: []kafkainfo.Member{}}
		for _, id := range slices.Sorted(maps.Keys(g.members)) {
			m := g.members[id]
			mi := kafkainfo.Member{MemberID: id, ClientID: m.clientID, Host: m.host, Assignment: []kafkainfo.Assignment{}}
			for _, t := range groupByTopic(m.assigned) {
				mi.Assignment = append(mi.Assignment, kafkainfo.Assignment{Topic: t.topic, Partitions: t.parts})
			}
			gi.Members = append(gi.Members, mi)
		}
		out = append(out, gi)
	}
	return out
}

// consumerGroupSubscriptions adds the topics the members of consumer group
// name subscribe to (names and regex matches) to into, and reports whether
// the group exists (OffsetDelete refuses those topics). gmu is held.
func (s *Server) consumerGroupSubscriptions(name string, into map[string]bool) bool {
	g := s.cg.groups[name]
	if g == nil {
		return false
	}
	for _, t := range g.subscribedTopics() {
		into[t] = true
	}
	return true
}
