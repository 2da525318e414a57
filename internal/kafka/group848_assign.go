package kafka

// The server-side assignors of KIP-848 consumer groups, named as Kafka
// names them: "uniform" (balanced and sticky: a member keeps what it had
// as far as balance allows) and "range" (per topic, the members
// subscribing to it in member id order get contiguous ranges, the first
// ones one more when the count does not divide; not sticky). Both are
// pure functions of the members' subscriptions, the topics' partition
// counts and, for uniform, the previous target assignment.

import (
	"cmp"
	"slices"
)

// tpKey is one partition of a topic.
type tpKey struct {
	topic string
	part  int32
}

func compareTP(a, b tpKey) int {
	if c := cmp.Compare(a.topic, b.topic); c != 0 {
		return c
	}
	return cmp.Compare(a.part, b.part)
}

// assignInput is what an assignor sees: each member's subscribed topics
// (only topics that exist), the partition count of every topic, and the
// previous target of each member.
type assignInput struct {
	subs  map[string][]string // member id -> subscribed topics
	parts map[string]int32    // topic -> partitions
	prev  map[string]map[tpKey]bool
}

const (
	assignorUniform = "uniform"
	assignorRange   = "range"
)

// knownAssignor reports whether name is a served assignor.
func knownAssignor(name string) bool { return name == assignorUniform || name == assignorRange }

// assign runs the assignor name (uniform when unknown) over in.
func assign(name string, in assignInput) map[string]map[tpKey]bool {
	if name == assignorRange {
		return assignRange(in)
	}
	return assignUniform(in)
}

func emptyTargets(in assignInput) map[string]map[tpKey]bool {
	out := make(map[string]map[tpKey]bool, len(in.subs))
	for id := range in.subs {
		out[id] = map[tpKey]bool{}
	}
	return out
}

// assignRange splits each topic's partitions into contiguous ranges over
// the members subscribing to it, in member id order.
func assignRange(in assignInput) map[string]map[tpKey]bool {
	out := emptyTargets(in)
	byTopic := map[string][]string{}
	for id, topics := range in.subs {
		for _, t := range topics {
			byTopic[t] = append(byTopic[t], id)
		}
	}
	for topic, ids := range byTopic {
		slices.Sort(ids)
		n := in.parts[topic]
		per, extra := n/int32(len(ids)), n%int32(len(ids))
		next := int32(0)
		for i, id := range ids {
			k := per
			if int32(i) < extra {
				k++
			}
			for p := next; p < next+k; p++ {
				out[id][tpKey{topic, p}] = true
			}
			next += k
		}
	}
	return out
}

// assignUniform keeps each member's previous partitions that it still
// subscribes to, gives the rest to the least loaded subscriber, then moves
// partitions from a member to a less loaded subscriber while that member
// has two more than it (so the loads differ by at most one among members
// that could take each other's partitions).
func assignUniform(in assignInput) map[string]map[tpKey]bool {
	out := emptyTargets(in)
	eligible := map[string][]string{} // topic -> subscribers, sorted
	for id, topics := range in.subs {
		for _, t := range topics {
			eligible[t] = append(eligible[t], id)
		}
	}
	var all []tpKey
	for topic, ids := range eligible {
		slices.Sort(ids)
		for p := int32(0); p < in.parts[topic]; p++ {
			all = append(all, tpKey{topic, p})
		}
	}
	slices.SortFunc(all, compareTP)
	owner := make(map[tpKey]string, len(all))
	subscribes := func(id, topic string) bool { return slices.Contains(in.subs[id], topic) }
	for id, prev := range in.prev {
		if _, ok := in.subs[id]; !ok {
			continue
		}
		for k := range prev {
			if k.part < in.parts[k.topic] && subscribes(id, k.topic) {
				owner[k] = id
				out[id][k] = true
			}
		}
	}
	load := func(id string) int { return len(out[id]) }
	least := func(ids []string) string {
		best := ids[0]
		for _, id := range ids[1:] {
			if load(id) < load(best) {
				best = id
			}
		}
		return best
	}
	for _, k := range all {
		if _, ok := owner[k]; ok {
			continue
		}
		id := least(eligible[k.topic])
		owner[k] = id
		out[id][k] = true
	}
	// Balance: each move lowers the sum of squared loads, so this ends;
	// the bound is a guard, not a tuning knob.
	for range len(all) + 1 {
		moved := false
		for _, k := range all {
			from := owner[k]
			to := least(eligible[k.topic])
			if load(to)+1 < load(from) {
				delete(out[from], k)
				out[to][k] = true
				owner[k] = to
				moved = true
			}
		}
		if !moved {
			break
		}
	}
	return out
}
