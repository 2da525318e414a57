package index

import (
	"fmt"
	"slices"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

func indexFileSize(t *testing.T, fs vfs.FS, seq int64) int64 {
	t.Helper()
	fi, err := fs.Stat(testDir + "/" + fileName(seq))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func keysOf(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("T#k%d", i)
	}
	return out
}

// Puts are queryable at once, reach the file in batches, and are durable
// only after Flush.
func TestWriteBehindQueryAndDurability(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 64, 10_000)
	var m model
	keys := keysOf(10)
	m.putRange(t, ix, keys, 0, 5)
	if n := indexFileSize(t, fs, 1); n != HeaderSize {
		t.Fatalf("file holds %d bytes before a batch was written, want the header only", n)
	}
	checkAll(t, ix, &m, 5, keys)
	for i := 5; i < pendingBatch+7; i++ {
		m.put(t, ix, keys[i%len(keys)], int64(i)*100, baseTs+int64(i))
	}
	if n := indexFileSize(t, fs, 1); n < HeaderSize+64*SlotSize+pendingBatch*EntrySize {
		t.Fatalf("file holds %d bytes after %d puts: the first batch was not written", n, pendingBatch+7)
	}
	checkAll(t, ix, &m, pendingBatch+7, keys)
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed := pendingBatch + 7
	for i := flushed; i < flushed+3; i++ {
		m.put(t, ix, keys[i%len(keys)], int64(i)*100, baseTs+int64(i))
	}
	fs.Crash()
	ix = openIndex(t, fs, 64, 10_000)
	checkAll(t, ix, &m, flushed, keys)
	if got := ix.MaxPhysOffset(); got != int64(flushed-1)*100 {
		t.Fatalf("MaxPhysOffset %d after the crash, want %d", got, (flushed-1)*100)
	}
}

// After a restart the newest file's slot table is loaded on the first Put:
// chains continue across the restart.
func TestWriteBehindChainsAcrossRestart(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 8, 10_000)
	var m model
	keys := keysOf(20) // several keys per slot
	m.putRange(t, ix, keys, 0, 30)
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	ix = openIndex(t, fs, 8, 10_000)
	m.putRange(t, ix, keys, 30, 60)
	checkAll(t, ix, &m, 60, keys)
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	ix = openIndex(t, fs, 8, 10_000)
	checkAll(t, ix, &m, 60, keys)
}

// Roll-over writes the full file's pending entries; truncation writes the
// newest file's before it cuts.
func TestWriteBehindRollOverAndTruncate(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 4, 10)
	var m model
	keys := keysOf(6)
	for i := range 35 {
		m.put(t, ix, keys[i%len(keys)], int64(i)*100, baseTs+int64(i)*1000)
	}
	checkAll(t, ix, &m, 35, keys)
	if err := ix.TruncatePhys(3200); err != nil { // keeps puts 0..31
		t.Fatal(err)
	}
	checkAll(t, ix, &m, 32, keys)
	fs.Crash() // the cut is durable; earlier files were never flushed
	ix = openIndex(t, fs, 4, 10)
	for _, k := range keys {
		got := query(t, ix, k)
		want := m.want(k, 32)
		// Entries of files never flushed may be gone, but nothing past the
		// cut may come back and nothing may be invented.
		for _, p := range got {
			if p >= 3200 || !slices.Contains(want, p) {
				t.Fatalf("query %s after the crash: %v, want a subset of %v", k, got, want)
			}
		}
	}
}
