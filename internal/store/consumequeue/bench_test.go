package consumequeue

import (
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// BenchmarkAppend includes MemFS's own cost of recording each write for
// crash simulation (its one allocation per op).
func BenchmarkAppend(b *testing.B) {
	q := openQueue(b, vfs.NewMem(), DefaultEntriesPerSegment, 0)
	b.SetBytes(EntrySize)
	b.ReportAllocs()
	for i := range int64(b.N) {
		if err := q.Append(i, entryFor(i)); err != nil {
			b.Fatal(err)
		}
	}
}

// benchmarkGet reads 32 entries at a time from the newest window entries of
// a 100,000-entry queue.
func benchmarkGet(b *testing.B, cache int, window int64) {
	const n = 100_000
	q := openQueue(b, vfs.NewMem(), 30_000, cache)
	appendRange(b, q, 0, n)
	dst := make([]Entry, 32)
	b.SetBytes(32 * EntrySize)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range int64(b.N) {
		off := n - window + (i*32)%(window-32)
		if _, err := q.Get(off, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGetTail reads entries served from the tail cache.
func BenchmarkGetTail(b *testing.B) { benchmarkGet(b, DefaultTailCacheEntries, 10_000) }

// BenchmarkGetDisk reads entries with pread.
func BenchmarkGetDisk(b *testing.B) { benchmarkGet(b, -1, 100_000) }
