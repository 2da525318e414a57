package index

import (
	"slices"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// blockRuns is the number of writes covering the given dirty blocks:
// consecutive blocks are written together, up to maxSlotWrite bytes.
func blockRuns(blocks map[int64]bool) int {
	sorted := make([]int64, 0, len(blocks))
	for b := range blocks {
		sorted = append(sorted, b)
	}
	slices.Sort(sorted)
	runs, length := 0, 0
	for i, b := range sorted {
		if i > 0 && b == sorted[i-1]+1 && (length+1)*slotBlockSize <= maxSlotWrite {
			length++
			continue
		}
		runs, length = runs+1, 1
	}
	return runs
}

// Puts write no slot: the cached table reaches the file only at Flush, in
// one write per run of consecutive dirty blocks, however often a slot was
// updated. Before, every Put wrote its slot (4 bytes).
func TestSlotBlocksWrittenAtFlush(t *testing.T) {
	const slots = 70_000 // 69 blocks, so one run is cut at maxSlotWrite
	mem := vfs.NewMem()
	cfs := &countFS{FS: mem}
	ix := openIndex(t, cfs, slots, 100_000)
	var m model
	keys := keysOf(300)
	m.put(t, ix, keys[0], 0, baseTs)
	f := ix.files[0]
	blocks := map[int64]bool{f.blockOf(f.slotOf(KeyHash(keys[0]))): true}
	w0 := cfs.writes.Load()
	const n = 1000
	for i := 1; i < n; i++ {
		k := keys[i%len(keys)]
		m.put(t, ix, k, int64(i)*100, baseTs+int64(i))
		blocks[f.blockOf(f.slotOf(KeyHash(k)))] = true
	}
	if got, want := cfs.writes.Load()-w0, int64(n/pendingBatch); got != want {
		t.Fatalf("%d writes during %d Puts, want %d (batches of entries, no slot)", got, n-1, want)
	}
	runs := blockRuns(blocks)
	if runs < 2 || len(blocks) < 60 {
		t.Fatalf("setup: %d dirty blocks in %d runs", len(blocks), runs)
	}
	w0 = cfs.writes.Load()
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	// The last partial batch of entries, the runs, the header.
	if got, want := cfs.writes.Load()-w0, int64(1+runs+1); got != want {
		t.Fatalf("Flush made %d writes, want %d (%d dirty blocks in %d runs)", got, want, len(blocks), runs)
	}
	w0 = cfs.writes.Load()
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := cfs.writes.Load() - w0; got != 0 {
		t.Fatalf("a Flush with nothing new made %d writes", got)
	}

	// One slot updated 500 times: one block write.
	for i := n; i < n+500; i++ {
		m.put(t, ix, keys[7], int64(i)*100, baseTs+int64(i))
	}
	w0 = cfs.writes.Load()
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := cfs.writes.Load()-w0, int64(1+1+1); got != want {
		t.Fatalf("Flush after 500 Puts of one key made %d writes, want %d", got, want)
	}

	// What Flush wrote is the table: a power loss leaves a settled file,
	// opened without a rebuild, that answers every query.
	mem.Crash()
	ix, lb := openLogged(t, mem, slots, 100_000)
	defer ix.Close()
	checkAll(t, ix, &m, len(m.keys), keys)
	if strings.Contains(lb.String(), "rebuilt") {
		t.Fatalf("a completed Flush was followed by a rebuild:\n%s", lb)
	}
}
