package transaction

// offsetSet is a set of non-negative queue offsets at or above a floor,
// stored as a bitmap; every offset below the floor is a member. Memory is
// one bit per offset between the floor and the highest member.
type offsetSet struct {
	floor int64    // offsets < floor are members
	base  int64    // offset of bit 0 of words[0]; floor rounded down to 64
	words []uint64 // bitmap from base
}

func newOffsetSet(floor int64) *offsetSet {
	return &offsetSet{floor: floor, base: floor &^ 63}
}

func (s *offsetSet) has(o int64) bool {
	if o < s.floor {
		return true
	}
	i := o - s.base
	w := i >> 6
	if w >= int64(len(s.words)) {
		return false
	}
	return s.words[w]&(1<<(uint64(i)&63)) != 0
}

func (s *offsetSet) add(o int64) {
	if o < s.floor {
		return
	}
	i := o - s.base
	w := int(i >> 6)
	for w >= len(s.words) {
		s.words = append(s.words, 0)
	}
	s.words[w] |= 1 << (uint64(i) & 63)
}

// advance raises the floor to f (never lowers it) and drops the words below.
func (s *offsetSet) advance(f int64) {
	if f <= s.floor {
		return
	}
	s.floor = f
	nb := f &^ 63
	drop := int((nb - s.base) >> 6)
	if drop >= len(s.words) {
		s.words = s.words[:0]
	} else {
		n := copy(s.words, s.words[drop:])
		s.words = s.words[:n]
	}
	s.base = nb
}
