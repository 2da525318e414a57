package dedup

import (
	"hash/maphash"
	"strconv"
	"testing"
)

var testSeed = maphash.MakeSeed()

func testHash(key string) uint64 { return maphash.String(testSeed, key) }

// Every key added is held while its store time is in the window, across
// rotations, and let go once both filters' entries have left it.
func TestEvictedKeysHoldUntilWindowPasses(t *testing.T) {
	const window = 100
	k := newEvictedKeys(4)
	for ts := int64(0); ts < 1000; ts++ {
		k.add(testHash("k"+strconv.FormatInt(ts, 10)), ts)
		from := ts - window
		for old := max(from, 0); old <= ts; old++ {
			if !k.mayHold(testHash("k"+strconv.FormatInt(old, 10)), from) {
				t.Fatalf("at %d: key added at %d (in the window from %d) not held", ts, old, from)
			}
		}
	}
	if k.mayHold(testHash("k999"), 1000) {
		t.Error("a key whose window passed (every entry of both filters older than from) is still held")
	}
}

// With four times as many keys as words, few keys never added test true.
func TestEvictedKeysFalsePositives(t *testing.T) {
	const words = 1 << 12
	k := newEvictedKeys(words)
	for i := range 4 * words {
		k.add(testHash("in"+strconv.Itoa(i)), 1)
	}
	fp := 0
	const probes = 20000
	for i := range probes {
		if k.mayHold(testHash("out"+strconv.Itoa(i)), 0) {
			fp++
		}
	}
	if fp > probes/50 {
		t.Errorf("%d of %d keys never added test true (over 2 %%)", fp, probes)
	}
	t.Logf("false positives: %d of %d", fp, probes)
}
