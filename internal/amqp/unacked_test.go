package amqp

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// tagsOf lists the tags l holds, in its order.
func tagsOf(l *unackedList) []uint64 {
	var out []uint64
	l.each(func(tag uint64, _ delivery) { out = append(out, tag) })
	return out
}

// TestUnackedListAgainstMap drives the list and a map with the same
// random deliveries, acks (single and multiple), rollbacks and takes, and
// compares what they hold after each step.
func TestUnackedListAgainstMap(t *testing.T) {
	q := &queue{}
	rng := rand.New(rand.NewPCG(1, 2))
	var l unackedList
	want := map[uint64]delivery{}
	next := uint64(0)
	for step := range 200_000 {
		switch r := rng.IntN(100); {
		case r < 45: // a delivery
			next++
			d := delivery{q: q, offset: int64(next)}
			l.add(next, d)
			want[next] = d
		case r < 85: // an ack of a tag delivered, maybe settled already
			if next == 0 {
				continue
			}
			tag := 1 + rng.Uint64N(next)
			_, held := want[tag]
			if got := l.remove(tag); got != held {
				t.Fatalf("step %d: remove(%d) = %v, held %v", step, tag, got, held)
			}
			delete(want, tag)
		case r < 88: // multiple=true up to a tag (0: all)
			tag := uint64(0)
			if next > 0 && rng.IntN(4) > 0 {
				tag = 1 + rng.Uint64N(next)
			}
			ds, tags := l.upTo(tag, nil, nil)
			var wantTags []uint64
			for wt := range want {
				if tag == 0 || wt <= tag {
					wantTags = append(wantTags, wt)
				}
			}
			slices.Sort(wantTags)
			if !slices.Equal(tags, wantTags) || len(ds) != len(tags) {
				t.Fatalf("step %d: upTo(%d) = %v, want %v", step, tag, tags, wantTags)
			}
			if got := l.anyUpTo(tag); got != (len(wantTags) > 0) {
				t.Fatalf("step %d: anyUpTo(%d) = %v with %d held", step, tag, got, len(wantTags))
			}
			for i, tg := range tags {
				if ds[i].offset != int64(tg) {
					t.Fatalf("step %d: tag %d holds offset %d", step, tg, ds[i].offset)
				}
				l.remove(tg)
				delete(want, tg)
			}
		case r < 95: // a rollback gives an acknowledged tag back
			if next == 0 {
				continue
			}
			tag := 1 + rng.Uint64N(next)
			d := delivery{q: q, offset: int64(tag)}
			l.add(tag, d)
			want[tag] = d
		case r < 96: // the channel closes
			ents := l.takeAll()
			if len(ents) != len(want) || !slices.IsSortedFunc(ents, func(a, b unackedEntry) int { return int(a.tag) - int(b.tag) }) {
				t.Fatalf("step %d: takeAll gave %d entries (sorted: %v), want %d", step, len(ents), slices.IsSortedFunc(ents, func(a, b unackedEntry) int { return int(a.tag) - int(b.tag) }), len(want))
			}
			clear(want)
		default: // a lookup
			if next == 0 {
				continue
			}
			tag := 1 + rng.Uint64N(next)
			d, ok := l.get(tag)
			wd, wok := want[tag]
			if ok != wok || d != wd {
				t.Fatalf("step %d: get(%d) = %v %v, want %v %v", step, tag, d, ok, wd, wok)
			}
		}
		if l.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, l.len(), len(want))
		}
		if len(l.ents()) > 2*l.len()+unackedSlack+1 {
			t.Fatalf("step %d: %d entries kept for %d deliveries held", step, len(l.ents()), l.len())
		}
		if step%1000 == 0 {
			var wantTags []uint64
			for wt := range want {
				wantTags = append(wantTags, wt)
			}
			slices.Sort(wantTags)
			if got := tagsOf(&l); !slices.Equal(got, wantTags) {
				t.Fatalf("step %d: holds %v, want %v", step, got, wantTags)
			}
		}
	}
}

// TestUnackedListBoundedByWhatIsHeld: a client that keeps its first
// delivery unacknowledged and acknowledges the million after it, each
// once the next one came, leaves the list at a few entries, not a
// million (the list is compacted).
func TestUnackedListBoundedByWhatIsHeld(t *testing.T) {
	q := &queue{}
	var l unackedList
	l.add(1, delivery{q: q, offset: 1})
	for tag := uint64(2); tag < 1_000_000; tag++ {
		l.add(tag, delivery{q: q, offset: int64(tag)})
		if tag > 2 {
			l.remove(tag - 1)
		}
	}
	if l.len() > 3 || len(l.ents()) > 2*l.len()+unackedSlack+1 || cap(l.buf) > 4*(len(l.ents())+unackedSlack) {
		t.Fatalf("%d deliveries held in %d entries (capacity %d)", l.len(), len(l.ents()), cap(l.buf))
	}
	if got := tagsOf(&l); got[0] != 1 {
		t.Fatalf("holds %v, want the first delivery first", got)
	}
}

// TestUnackedListDeliverAckAllocates: a consumer's steady state (deliver
// one, acknowledge the oldest, 256 held) allocates nothing per message.
func TestUnackedListDeliverAckAllocates(t *testing.T) {
	q := &queue{}
	c := &consumer{}
	var l unackedList
	tag := uint64(0)
	for range 256 {
		tag++
		l.add(tag, delivery{q: q, offset: int64(tag), cons: c})
	}
	// Counted over 10,000 messages: the array growing once in 256
	// messages would be 39 allocations.
	allocs := testing.AllocsPerRun(1, func() {
		for range 10_000 {
			tag++
			l.add(tag, delivery{q: q, offset: int64(tag), cons: c})
			if d, ok := l.get(tag - 256); !ok || d.offset != int64(tag-256) {
				t.Fatalf("tag %d not held", tag-256)
			}
			l.remove(tag - 256)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.0f allocations in 10,000 deliveries and acks", allocs)
	}
}
