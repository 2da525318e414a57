package kafka

// Broker groups briefly absent from the NameServers. When every member of
// a group is away at once (all of them restarting for a role change after
// a failover, or all down), the NameServers drop the group from their
// registrations and from every topic's route. Laid out from such a view, a
// topic would lose that group's partitions and the partitions of the groups
// after it would renumber: a producer's partition 5 would become another
// group's queue, and a Kafka topic never loses partitions. So the door
// remembers, per topic, the groups it saw hosting it with their queue
// counts, and for absentGroupHold after a group was last seen with a
// member it keeps the group's partitions where they were, without a leader
// (LEADER_NOT_AVAILABLE, which clients retry; a produce or fetch of them
// answers NOT_LEADER_OR_FOLLOWER), and it stays among the groups consumer
// group coordinators are chosen from (the groups it coordinates get
// COORDINATOR_NOT_AVAILABLE meanwhile instead of moving). A group that is registered again but no
// longer lists a topic deleted it there, and its partitions of that topic
// go at once; a group away longer than absentGroupHold (taken out of the
// cluster) is left out, and the partitions after it renumber. The memory is
// the door's own: a door that starts while a group is away does not know
// that group's partitions until it returns.

import (
	"maps"
	"slices"
	"time"
)

// absentGroupHold is how long a group without any registered member keeps
// its partitions in the layout. A variable for tests.
var absentGroupHold = 5 * time.Minute

// absentMemo is what the door remembers of the groups it saw (refresh
// goroutine only: written under clusterCache.ask).
type absentMemo struct {
	lastSeen map[string]time.Time        // group -> when a view last listed a member of it
	topics   map[string]map[string]int32 // topic -> group -> queues, as last listed
}

// keepAbsent returns v with the remembered partitions of the groups that
// have no member in it put back (and the groups named in Absent), and
// records what v lists.
func (m *absentMemo) keepAbsent(v ClusterView, now time.Time) ClusterView {
	if m.lastSeen == nil {
		m.lastSeen, m.topics = map[string]time.Time{}, map[string]map[string]int32{}
	}
	present := map[string]bool{}
	for _, b := range v.Brokers {
		present[b.Group] = true
		m.lastSeen[b.Group] = now
	}
	var absent []string
	for g, seen := range m.lastSeen {
		switch {
		case present[g]:
		case now.Sub(seen) > absentGroupHold:
			delete(m.lastSeen, g)
			for _, groups := range m.topics {
				delete(groups, g)
			}
		default:
			absent = append(absent, g)
		}
	}
	for topic, tgs := range v.Topics {
		groups := m.topics[topic]
		if groups == nil {
			groups = map[string]int32{}
			m.topics[topic] = groups
		}
		for _, tg := range tgs {
			if present[tg.Group] {
				groups[tg.Group] = tg.Queues
			}
		}
	}
	if len(absent) == 0 {
		m.forgetDeleted(v, present)
		return v
	}
	slices.Sort(absent)
	topics := maps.Clone(v.Topics)
	if topics == nil {
		topics = map[string][]TopicGroup{}
	}
	for topic, groups := range m.topics {
		for _, g := range absent {
			q, ok := groups[g]
			if !ok || slices.ContainsFunc(topics[topic], func(tg TopicGroup) bool { return tg.Group == g }) {
				continue
			}
			topics[topic] = append(slices.Clip(topics[topic]), TopicGroup{Group: g, Queues: q})
		}
	}
	m.forgetDeleted(v, present)
	v.Topics, v.Absent = topics, absent
	return v
}

// forgetDeleted drops the remembered groups of a topic that are registered
// and list it no more (they deleted it), and topics no group is left for.
func (m *absentMemo) forgetDeleted(v ClusterView, present map[string]bool) {
	for topic, groups := range m.topics {
		for g := range groups {
			if present[g] && !slices.ContainsFunc(v.Topics[topic], func(tg TopicGroup) bool { return tg.Group == g }) {
				delete(groups, g)
			}
		}
		if len(groups) == 0 {
			delete(m.topics, topic)
		}
	}
}
