package kafka

import (
	"fmt"
	"testing"
)

func loads(out map[string]map[tpKey]bool) map[string]int {
	l := map[string]int{}
	for id, set := range out {
		l[id] = len(set)
	}
	return l
}

// checkAssignment fails unless every partition of the subscribed topics
// is assigned exactly once, to a member subscribing to it.
func checkAssignment(t *testing.T, in assignInput, out map[string]map[tpKey]bool) {
	t.Helper()
	seen := map[tpKey]string{}
	for id, set := range out {
		for k := range set {
			if other, ok := seen[k]; ok {
				t.Fatalf("%v assigned to %s and %s", k, other, id)
			}
			seen[k] = id
			sub := false
			for _, topic := range in.subs[id] {
				sub = sub || topic == k.topic
			}
			if !sub || k.part >= in.parts[k.topic] {
				t.Fatalf("%v assigned to %s, which does not subscribe to it", k, id)
			}
		}
	}
	want := map[string]bool{}
	for _, topics := range in.subs {
		for _, topic := range topics {
			want[topic] = true
		}
	}
	n := 0
	for topic := range want {
		n += int(in.parts[topic])
	}
	if len(seen) != n {
		t.Fatalf("%d partitions assigned, want %d", len(seen), n)
	}
}

// TestAssignUniformBalancedAndSticky: the uniform assignor spreads the
// partitions within one of each other and, when a member joins, moves only
// what balance needs (each member keeps all but what it gives the new one).
func TestAssignUniformBalancedAndSticky(t *testing.T) {
	in := assignInput{subs: map[string][]string{"a": {"x", "y"}, "b": {"x", "y"}}, parts: map[string]int32{"x": 5, "y": 4}}
	first := assign(assignorUniform, in)
	checkAssignment(t, in, first)
	if l := loads(first); l["a"]+l["b"] != 9 || l["a"]-l["b"] > 1 || l["b"]-l["a"] > 1 {
		t.Fatalf("loads %v", l)
	}
	in.subs["c"] = []string{"x", "y"}
	in.prev = first
	second := assign(assignorUniform, in)
	checkAssignment(t, in, second)
	for id, l := range loads(second) {
		if l != 3 {
			t.Fatalf("loads %v, want 3 each", loads(second))
		}
		for k := range second[id] {
			if id != "c" && !first[id][k] {
				t.Fatalf("%s got %v, which it did not have: only c should gain", id, k)
			}
		}
	}
	// Members of different subscriptions: a takes only x, b x and y.
	het := assignInput{subs: map[string][]string{"a": {"x"}, "b": {"x", "y"}}, parts: map[string]int32{"x": 4, "y": 4}}
	out := assign(assignorUniform, het)
	checkAssignment(t, het, out)
	if l := loads(out); l["a"] != 4 || l["b"] != 4 {
		t.Fatalf("heterogeneous loads %v, want 4 and 4", l)
	}
}

// TestAssignRange: per topic, contiguous ranges in member id order, the
// first members one more.
func TestAssignRange(t *testing.T) {
	in := assignInput{subs: map[string][]string{"m2": {"x"}, "m1": {"x", "y"}, "m3": {"x"}}, parts: map[string]int32{"x": 7, "y": 2}}
	out := assign(assignorRange, in)
	checkAssignment(t, in, out)
	want := map[string]string{"m1": "x0 x1 x2 y0 y1", "m2": "x3 x4", "m3": "x5 x6"}
	for id, w := range want {
		got := ""
		for _, tp := range groupByTopic(out[id]) {
			for _, p := range tp.parts {
				if got != "" {
					got += " "
				}
				got += fmt.Sprintf("%s%d", tp.topic, p)
			}
		}
		if got != w {
			t.Errorf("%s got %q, want %q", id, got, w)
		}
	}
}

// BenchmarkAssignUniform: a member joins a group of members subscribing
// to 8 topics of 1024 partitions (the previous target kept where balance
// allows): the work a join does under the groups' lock.
func BenchmarkAssignUniform(b *testing.B) {
	for _, members := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("members=%d", members), func(b *testing.B) {
			in := assignInput{subs: map[string][]string{}, parts: map[string]int32{}}
			var topics []string
			for i := 0; i < 8; i++ {
				topics = append(topics, fmt.Sprintf("t%d", i))
				in.parts[topics[i]] = 1024
			}
			for m := 0; m < members; m++ {
				in.subs[fmt.Sprintf("m%04d", m)] = topics
			}
			in.prev = assign(assignorUniform, in)
			in.subs["joining"] = topics
			b.ReportAllocs()
			for b.Loop() {
				assign(assignorUniform, in)
			}
		})
	}
}
