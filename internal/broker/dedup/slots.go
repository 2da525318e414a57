package dedup

// slotTable holds the table's entries by the hash of their key, open
// addressed: linear probing from the slot the hash's low bits name, and
// backward-shift deletion (no tombstones). A slot keeps the hash next to
// its entry, so a look-up reads one slot (rarely a few neighbours) and
// follows an entry only when its hash matches: a new key, the common case,
// reads one slot and no entry. Entries whose keys share a hash each take a
// slot of their own. The table grows (doubling) past three quarters full
// and never shrinks, as a map would not; growing rehashes every entry at
// once (0.1 to 0.2 s for 400k entries, measured on a loaded 2-core
// machine), so the Deduplicator makes its table large enough for
// MaxEntries from the start (newSlotTable), and only more sends in flight
// than that leaves room for could make it grow.
type slotTable struct {
	slots []slot // len a power of two (or 0)
	n     int    // slots in use
}

type slot struct {
	hash uint64
	e    *entry // nil: the slot is free
}

const minSlots = 1 << 10

// newSlotTable returns a table that holds n entries without growing.
func newSlotTable(n int) slotTable {
	size := minSlots
	for 3*size < 4*n {
		size *= 2
	}
	return slotTable{slots: make([]slot, size)}
}

// find returns the entry of key (hash its hash), or nil.
func (t *slotTable) find(key string, hash uint64) *entry {
	if t.n == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := hash & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.e == nil {
			return nil
		}
		if s.hash == hash && s.e.key == key {
			return s.e
		}
	}
}

// add puts e in the table; it must not be there already.
func (t *slotTable) add(e *entry) {
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	t.place(e)
	t.n++
}

// place puts e in the first free slot from its hash's.
func (t *slotTable) place(e *entry) {
	mask := uint64(len(t.slots) - 1)
	i := e.hash & mask
	for t.slots[i].e != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = slot{e.hash, e}
}

func (t *slotTable) grow() {
	old := t.slots
	t.slots = make([]slot, max(minSlots, 2*len(old)))
	for _, s := range old {
		if s.e != nil {
			t.place(s.e)
		}
	}
}

// remove takes e out of the table and reports whether it was there.
func (t *slotTable) remove(e *entry) bool {
	if t.n == 0 {
		return false
	}
	mask := uint64(len(t.slots) - 1)
	i := e.hash & mask
	for t.slots[i].e != e {
		if t.slots[i].e == nil {
			return false
		}
		i = (i + 1) & mask
	}
	// Fill the hole at i with the next entry of its run that may move back
	// to it (one whose own slot is not between i and where it is), and so
	// on, until a free slot ends the run: every entry stays reachable from
	// its hash's slot without a free slot on the way.
	for j := i; ; {
		j = (j + 1) & mask
		s := t.slots[j]
		if s.e == nil {
			break
		}
		if (j-s.hash)&mask >= (j-i)&mask {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = slot{}
	t.n--
	return true
}
