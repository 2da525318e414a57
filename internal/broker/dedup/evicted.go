package dedup

import "math"

// evictedKeys remembers, approximately, the keys of the entries evicted
// before their window passed (the ring was full), so that a miss needs
// the key index only when its key may be one of them: a key that was never
// evicted is answered from the table alone, at any send rate. It is a pair
// of Bloom filters (a key's bits all in one 64-bit word, so a test reads
// one word per filter): evictions go into cur; cur becomes prev once its
// oldest entry's window has passed and every entry of prev has left the
// window (prev is then dropped). So every evicted key still in the window
// is in cur or prev. A false positive costs one needless index lookup; a
// key is never missed. Memory: evictedWordsPerEntry 64-bit words per ring
// entry in each filter (4 MiB for both at the default MaxEntries), made at
// the first eviction. Guarded by Deduplicator.mu.
type evictedKeys struct {
	cur, prev evictedFilter
}

// evictedWordsPerEntry sizes each filter: a word per ring entry, so that
// an eviction rate of several times MaxEntries per window still keeps the
// false positives in the low per cents.
const evictedWordsPerEntry = 1

// evictedFilter is one Bloom filter with the store-time range (ms) of the
// entries added to it.
type evictedFilter struct {
	words        []uint64 // len a power of two
	minTs, maxTs int64
}

func newEvictedKeys(maxEntries int) *evictedKeys {
	n := 64
	for n < maxEntries*evictedWordsPerEntry {
		n *= 2
	}
	return &evictedKeys{
		cur:  evictedFilter{words: make([]uint64, n), minTs: math.MaxInt64, maxTs: math.MinInt64},
		prev: evictedFilter{words: make([]uint64, n), minTs: math.MaxInt64, maxTs: math.MinInt64},
	}
}

// add records the key (its hash, entry.hash) of an evicted entry stored
// at storeTs.
func (k *evictedKeys) add(hash uint64, storeTs int64) {
	k.cur.add(hash, storeTs)
}

// mayHold reports whether the key of hash may be that of an entry evicted
// with a store time at or after from.
func (k *evictedKeys) mayHold(hash uint64, from int64) bool {
	k.rotate(from)
	return k.cur.mayHold(hash, from) || k.prev.mayHold(hash, from)
}

// rotate drops prev and starts a new cur when every entry of prev has
// left the window and the oldest of cur has.
func (k *evictedKeys) rotate(from int64) {
	if k.prev.maxTs >= from || k.cur.minTs >= from {
		return
	}
	k.prev, k.cur = k.cur, k.prev
	clear(k.cur.words)
	k.cur.minTs, k.cur.maxTs = math.MaxInt64, math.MinInt64
}

// bits are a hash's four bits in its word: four 6-bit slices of the hash's
// upper half (the lower half picks the word).
func bits(h uint64) uint64 {
	return 1<<(h>>32&63) | 1<<(h>>38&63) | 1<<(h>>44&63) | 1<<(h>>50&63)
}

func (f *evictedFilter) add(h uint64, storeTs int64) {
	f.words[h&uint64(len(f.words)-1)] |= bits(h)
	f.minTs, f.maxTs = min(f.minTs, storeTs), max(f.maxTs, storeTs)
}

func (f *evictedFilter) mayHold(h uint64, from int64) bool {
	if f.maxTs < from {
		return false // empty, or every entry added has left the window
	}
	b := bits(h)
	return f.words[h&uint64(len(f.words)-1)]&b == b
}
