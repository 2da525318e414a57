package dedup

import "testing"

// Keys whose hashes are equal each take a slot of their own: each is
// found, replaced and removed by itself.
func TestTableChainsKeysOfOneHash(t *testing.T) {
	d, err := New(Config{Window: 1, Index: struct{ Index }{}})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := &entry{key: "a", hash: 7}, &entry{key: "b", hash: 7}, &entry{key: "c", hash: 7}
	for _, e := range []*entry{a, b, c} {
		d.setLocked(e, d.lookupLocked(e.key, e.hash))
	}
	want := func(key string, e *entry, entries int) {
		t.Helper()
		if got := d.lookupLocked(key, 7); got != e {
			t.Fatalf("lookup %q: %v, want %v", key, got, e)
		}
		if d.table.n != entries {
			t.Fatalf("%d entries, want %d", d.table.n, entries)
		}
	}
	want("a", a, 3)
	want("b", b, 3)
	want("c", c, 3)
	d.removeLocked(b) // in the middle of the chain
	want("b", nil, 2)
	want("a", a, 2)
	want("c", c, 2)
	a2 := &entry{key: "a", hash: 7}
	d.setLocked(a2, d.lookupLocked("a", 7))
	want("a", a2, 2)
	d.removeLocked(a) // replaced: no longer in the table
	want("a", a2, 2)
	d.removeLocked(b) // removed before
	want("c", c, 2)
	d.removeLocked(c)
	d.removeLocked(a2)
	want("a", nil, 0)
	for _, s := range d.table.slots {
		if s.e != nil {
			t.Fatalf("table holds %v, want empty", s.e)
		}
	}
}
