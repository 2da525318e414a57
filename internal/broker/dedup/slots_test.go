package dedup

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestSlotTableAgreesWithMap runs random adds and removes on a slotTable
// and on a map: a quarter of the hashes from a small set (many equal, many
// sharing their low bits, some in the table's last slots so runs wrap around), through
// growth; after each step every live key is found as its entry, every
// removed key is not, and the count agrees.
func TestSlotTableAgreesWithMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	hashes := []uint64{0, 1, 2, minSlots - 1, minSlots - 2, minSlots, 2*minSlots - 1, 1 << 40, 1<<40 + 1, 7, 7 + minSlots, 7 + 2*minSlots}
	var tb slotTable
	live := map[string]*entry{}
	var dead []*entry
	check := func(step int) {
		t.Helper()
		if tb.n != len(live) {
			t.Fatalf("step %d: %d entries, the map has %d", step, tb.n, len(live))
		}
		used := 0
		for _, s := range tb.slots {
			if s.e != nil {
				used++
				if s.hash != s.e.hash {
					t.Fatalf("step %d: slot hash %d, its entry's %d", step, s.hash, s.e.hash)
				}
			}
		}
		if used != len(live) {
			t.Fatalf("step %d: %d slots in use, %d live", step, used, len(live))
		}
		for k, e := range live {
			if got := tb.find(k, e.hash); got != e {
				t.Fatalf("step %d: find %q = %v, want %v", step, k, got, e)
			}
		}
		for _, e := range dead {
			if _, ok := live[e.key]; !ok && tb.find(e.key, e.hash) != nil {
				t.Fatalf("step %d: removed key %q found", step, e.key)
			}
		}
	}
	next := 0
	for step := range 20000 {
		switch op := r.IntN(10); {
		case op < 6 || len(live) == 0: // add a new key
			h := hashes[r.IntN(len(hashes))]
			if r.IntN(4) != 0 {
				h = r.Uint64()
			}
			e := &entry{key: fmt.Sprint("k", next), hash: h}
			next++
			tb.add(e)
			live[e.key] = e
		case op < 9: // remove a live key
			for k, e := range live {
				if !tb.remove(e) {
					t.Fatalf("step %d: live %q not removed", step, k)
				}
				delete(live, k)
				dead = append(dead, e)
				break
			}
		default: // remove one removed before, or a key never added
			e := &entry{key: "never", hash: hashes[r.IntN(len(hashes))]}
			if len(dead) > 0 && r.IntN(2) == 0 {
				e = dead[r.IntN(len(dead))]
			}
			if tb.remove(e) {
				t.Fatalf("step %d: removed %q, which was not there", step, e.key)
			}
		}
		if step%197 == 0 || step > 19950 {
			check(step)
		}
	}
	if len(tb.slots) <= minSlots {
		t.Fatalf("the table never grew (%d slots, %d entries)", len(tb.slots), tb.n)
	}
	check(-1)
}

// TestSlotTableSizedForMaxEntries: a Deduplicator's table holds
// MaxEntries entries without growing (growth rehashes every entry at once).
func TestSlotTableSizedForMaxEntries(t *testing.T) {
	for _, n := range []int{1, minSlots, 3 * minSlots, DefaultMaxEntries} {
		tb := newSlotTable(n)
		size := len(tb.slots)
		if size&(size-1) != 0 {
			t.Fatalf("%d entries: %d slots, not a power of two", n, size)
		}
		for i := range n {
			tb.add(&entry{key: fmt.Sprint(i), hash: uint64(i) * 0x9E3779B97F4A7C15})
		}
		if len(tb.slots) != size {
			t.Fatalf("%d entries: the table grew from %d to %d slots", n, size, len(tb.slots))
		}
	}
	d, err := New(Config{Window: 1, MaxEntries: 5000, Index: struct{ Index }{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(d.table.slots) < 5000*4/3 {
		t.Fatalf("a Deduplicator of MaxEntries 5000 has %d slots", len(d.table.slots))
	}
}
