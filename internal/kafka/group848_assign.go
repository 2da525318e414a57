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
	"maps"
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
// that could take each other's partitions). Members are indexed by
// integers so that a pass over P partitions with M subscribers each costs
// P*M cheap steps: it runs under the groups' lock (Server.gmu). A join
// of the shape of BenchmarkAssignUniform's largest case (8192 partitions,
// 1,000 members) took about 15 ms in a one-off timing on a loaded 2-core
// machine; a first version keyed by member id took 1.7 s.
func assignUniform(in assignInput) map[string]map[tpKey]bool {
	ids := slices.Sorted(maps.Keys(in.subs))
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	eligible := map[string][]int{} // topic -> subscribers, in index order
	subscribes := make([]map[string]bool, len(ids))
	for i, id := range ids {
		subscribes[i] = map[string]bool{}
		for _, t := range in.subs[id] {
			if !subscribes[i][t] {
				subscribes[i][t] = true
				eligible[t] = append(eligible[t], i)
			}
		}
	}
	topics := slices.Sorted(maps.Keys(eligible))
	owner := map[string][]int{} // topic -> partition -> member index, -1 none
	for _, t := range topics {
		owner[t] = slices.Repeat([]int{-1}, int(in.parts[t]))
	}
	load := make([]int, len(ids))
	for id, prev := range in.prev {
		i, ok := index[id]
		if !ok {
			continue
		}
		for k := range prev {
			if subscribes[i][k.topic] && k.part < in.parts[k.topic] && owner[k.topic][k.part] < 0 {
				owner[k.topic][k.part] = i
				load[i]++
			}
		}
	}
	least := func(cands []int) int {
		best := cands[0]
		for _, c := range cands[1:] {
			if load[c] < load[best] {
				best = c
			}
		}
		return best
	}
	for _, t := range topics {
		for p, o := range owner[t] {
			if o < 0 {
				to := least(eligible[t])
				owner[t][p] = to
				load[to]++
			}
		}
	}
	// Balance: each move lowers the sum of squared loads, so this ends;
	// the bound is a guard, not a tuning knob.
	for range len(load) + 1 {
		moved := false
		for _, t := range topics {
			for p, from := range owner[t] {
				if to := least(eligible[t]); load[to]+1 < load[from] {
					owner[t][p] = to
					load[from]--
					load[to]++
					moved = true
				}
			}
		}
		if !moved {
			break
		}
	}
	out := emptyTargets(in)
	for _, t := range topics {
		for p, o := range owner[t] {
			out[ids[o]][tpKey{t, int32(p)}] = true
		}
	}
	return out
}
