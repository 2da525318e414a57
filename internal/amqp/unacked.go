package amqp

import "slices"

// unackedList is a channel's deliveries not yet settled (guarded by the
// channel's mu), kept by value in delivery-tag order: a delivery appends
// one (tags only grow), an ack finds its tag by binary search, so neither
// allocates, and basic.ack with multiple=true walks only the tags up to
// its own. A settled entry is cleared in place (its q set to nil) and the
// cleared ones at either end are dropped; once the cleared ones are more
// than the live ones (and more than a few) the list is compacted, so its
// length stays under twice the deliveries held, plus a constant, however
// the client acknowledges them.
type unackedList struct {
	buf  []unackedEntry // the entries are buf[lo:]
	lo   int
	live int
}

// ents is the entries, in tag order.
func (l *unackedList) ents() []unackedEntry { return l.buf[l.lo:] }

// unackedEntry is one delivery and its tag; d.q is nil once it is settled.
type unackedEntry struct {
	tag uint64
	d   delivery
}

// unackedSlack is how many cleared entries the list may hold before it
// is compacted whatever the live ones.
const unackedSlack = 32

// len is how many deliveries are held.
func (l *unackedList) len() int { return l.live }

// add holds d under tag. A tag above every one held is appended; a lower
// one (a transaction rolled back gives its deliveries back) goes to its
// place.
func (l *unackedList) add(tag uint64, d delivery) {
	if n := len(l.buf); n == l.lo || l.buf[n-1].tag < tag {
		if n == cap(l.buf) && l.lo >= n/4 {
			// The room the settled ones left at the front is used again
			// (at least a quarter of the array: amortised O(1)).
			k := copy(l.buf, l.buf[l.lo:])
			clear(l.buf[k:])
			l.buf, l.lo = l.buf[:k], 0
		}
		l.buf = append(l.buf, unackedEntry{tag: tag, d: d})
		l.live++
		return
	}
	i, found := l.search(tag)
	if found {
		if l.buf[l.lo+i].d.q == nil {
			l.live++
		}
		l.buf[l.lo+i].d = d
		return
	}
	l.buf = slices.Insert(l.buf, l.lo+i, unackedEntry{tag: tag, d: d})
	l.live++
}

// search returns where tag is, or would be, in ents.
func (l *unackedList) search(tag uint64) (int, bool) {
	ents := l.ents()
	if len(ents) > 0 && ents[0].tag == tag { // acks mostly come in order
		return 0, true
	}
	return slices.BinarySearchFunc(ents, tag, func(e unackedEntry, t uint64) int {
		switch {
		case e.tag < t:
			return -1
		case e.tag > t:
			return 1
		}
		return 0
	})
}

// get returns the delivery held under tag.
func (l *unackedList) get(tag uint64) (delivery, bool) {
	i, found := l.search(tag)
	if !found || l.buf[l.lo+i].d.q == nil {
		return delivery{}, false
	}
	return l.buf[l.lo+i].d, true
}

// remove forgets the delivery held under tag; it reports whether there
// was one.
func (l *unackedList) remove(tag uint64) bool {
	i, found := l.search(tag)
	if !found || l.buf[l.lo+i].d.q == nil {
		return false
	}
	l.buf[l.lo+i].d = delivery{}
	l.live--
	l.trim()
	return true
}

// trim drops the cleared entries at both ends and compacts the list when
// the cleared ones inside outnumber the live ones.
func (l *unackedList) trim() {
	for l.lo < len(l.buf) && l.buf[l.lo].d.q == nil {
		l.lo++
	}
	hi := len(l.buf)
	for hi > l.lo && l.buf[hi-1].d.q == nil {
		hi--
	}
	clear(l.buf[hi:])
	l.buf = l.buf[:hi]
	if l.live == 0 {
		l.buf, l.lo = l.buf[:0], 0 // the array is kept for the next ones
		return
	}
	if dead := len(l.buf) - l.lo - l.live; dead > unackedSlack && dead > l.live {
		n := 0
		for _, e := range l.buf[l.lo:] {
			if e.d.q != nil {
				l.buf[n] = e
				n++
			}
		}
		clear(l.buf[n:])
		l.buf, l.lo = l.buf[:n], 0
	}
}

// each calls fn for every delivery held, in tag order.
func (l *unackedList) each(fn func(tag uint64, d delivery)) {
	for _, e := range l.ents() {
		if e.d.q != nil {
			fn(e.tag, e.d)
		}
	}
}

// anyUpTo reports whether a delivery is held under a tag at most tag (0:
// any tag).
func (l *unackedList) anyUpTo(tag uint64) bool {
	for _, e := range l.ents() {
		if tag != 0 && e.tag > tag {
			return false
		}
		if e.d.q != nil {
			return true
		}
	}
	return false
}

// upTo appends to ds and tags the deliveries held under a tag at most
// tag (0: all of them), in tag order, leaving them held.
func (l *unackedList) upTo(tag uint64, ds []delivery, tags []uint64) ([]delivery, []uint64) {
	for _, e := range l.ents() {
		if tag != 0 && e.tag > tag {
			break
		}
		if e.d.q != nil {
			ds, tags = append(ds, e.d), append(tags, e.tag)
		}
	}
	return ds, tags
}

// takeAll returns every delivery held, in tag order, and empties the list.
func (l *unackedList) takeAll() []unackedEntry {
	out := make([]unackedEntry, 0, l.live)
	for _, e := range l.ents() {
		if e.d.q != nil {
			out = append(out, e)
		}
	}
	l.buf, l.lo, l.live = nil, 0, 0
	return out
}
