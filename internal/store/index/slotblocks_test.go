package index

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	ix := openIndexLazy(t, cfs, slots, 100_000, -1) // the blocks are not deferred
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

// wantAll is want for every key at once.
func (m *model) wantAll(n int) map[string][]int64 {
	out := map[string][]int64{}
	for i := n - 1; i >= 0; i-- {
		if k := m.keys[i]; !slices.Contains(out[k], m.phys[i]) {
			out[k] = append(out[k], m.phys[i])
		}
	}
	return out
}

// checkCrashed opens the index a power loss left in fs and checks it
// against the first puts of m: every key of the first covered puts (those
// a completed Flush covered) is found, nothing is returned that was not
// put under the key, and after re-indexing from MaxPhysOffset, as the store
// does, every answer is exact.
func checkCrashed(t *testing.T, fs vfs.FS, slots, maxEntries int, m *model, covered, puts int, keys []string, what string) {
	t.Helper()
	ix, err := Open(Config{FS: fs, Dir: testDir, HashSlots: slots, MaxEntries: maxEntries})
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	defer ix.Close()
	allByKey, durableByKey := m.wantAll(puts), m.wantAll(covered)
	for _, k := range keys {
		got, all, durable := query(t, ix, k), allByKey[k], durableByKey[k]
		for _, p := range got {
			if !slices.Contains(all, p) {
				t.Fatalf("%s: %s returned %d, never put under it (got %v)", what, k, p, got)
			}
		}
		for _, p := range durable {
			if !slices.Contains(got, p) {
				t.Fatalf("%s: %s lost flushed %d (got %v)", what, k, p, got)
			}
		}
	}
	from := ix.MaxPhysOffset()
	for i := range puts {
		if m.phys[i] >= from {
			if err := ix.Put(m.keys[i], m.phys[i], m.ts[i]); err != nil {
				t.Fatalf("%s: re-index: %v", what, err)
			}
		}
	}
	for _, k := range keys {
		if got, want := query(t, ix, k), allByKey[k]; !slices.Equal(got, want) {
			t.Fatalf("%s: after re-indexing %s = %v, want %v", what, k, got, want)
		}
	}
}

// TestCrashAtEveryStepOfFlush loses power before every write and fdatasync
// of Flush rounds (and after each round), strictly and with torn writes,
// while Puts run between the steps that do not hold the index lock (so the
// slot blocks being written hold entries newer than the header's count,
// and entry batches are written in the middle of the round). Every key a
// completed Flush covered must be found, and none may point at an entry of
// another key.
func TestCrashAtEveryStepOfFlush(t *testing.T) {
	for _, lazy := range []int{-1, 0} {
		name := map[int]string{-1: "eager", 0: "deferred"}[lazy]
		t.Run(name, func(t *testing.T) { testCrashAtEveryStepOfFlushWith(t, lazy) })
	}
}

func testCrashAtEveryStepOfFlushWith(t *testing.T, lazy int) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 13))
	// 69 blocks; keys repeat, so slots hold chains whose older entries a
	// wrong slot would hide, and entry numbers pass 256 (a torn slot can
	// be plausible).
	const slots, maxEntries = 70_000, 1 << 20
	keys := keysOf(400)
	mem := vfs.NewMem()
	hfs := &hookFS{FS: mem}
	ix := openIndexLazy(t, hfs, slots, maxEntries, lazy)
	var m model
	put := func() {
		i := int64(len(m.keys))
		m.put(t, ix, keys[rng.IntN(len(keys))], i*100, baseTs+i*10)
	}
	for range 50 {
		put()
	}
	if err := ix.Flush(); err != nil { // the file's directory entry is durable from here
		t.Fatal(err)
	}
	covered, points := len(m.keys), 0
	for round := range rounds(12) {
		for range 100 + rng.IntN(400) {
			put()
		}
		start := len(m.keys)
		// Puts per step of this round, at most: none (entries written
		// during the round cannot make the file unsettled by chance),
		// a few (slots past the header's count, no entry batch
		// written), or enough to write batches of entries meanwhile.
		burst := []int{0, 4, 40, 200}[rng.IntN(4)]
		step := 0
		hfs.setHook(func(op string) {
			step++
			what := fmt.Sprintf("seed %d round %d step %d (before %s)", seed, round, step, op)
			checkCrashed(t, mem.CrashClone(), slots, maxEntries, &m, covered, len(m.keys), keys, what+" strict")
			for i := range 3 {
				torn := mem.CrashCloneWith(rand.New(rand.NewPCG(seed, uint64(points))))
				checkCrashed(t, torn, slots, maxEntries, &m, covered, len(m.keys), keys, fmt.Sprintf("%s torn %d", what, i))
				points++
			}
			// Where Flush does not hold the index lock, Puts go on.
			if ix.mu.TryLock() {
				ix.mu.Unlock()
				for range rng.IntN(burst + 1) {
					put()
				}
			}
		})
		if err := ix.Flush(); err != nil {
			t.Fatal(err)
		}
		hfs.setHook(nil)
		if step < 5 {
			t.Fatalf("round %d: Flush made only %d writes and syncs", round, step)
		}
		covered = start
		what := fmt.Sprintf("seed %d round %d after Flush", seed, round)
		checkCrashed(t, mem.CrashClone(), slots, maxEntries, &m, covered, len(m.keys), keys, what)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	checkCrashed(t, mem.CrashClone(), slots, maxEntries, &m, len(m.keys), len(m.keys), keys, "after Close")
}

// TestSlotPastCountInOlderFileRebuilt: a completed Flush can leave a slot
// pointing past its header's count (its block was encoded after the count
// was taken). If the file then rolls over twice before the next Flush
// completes, and a power loss keeps the newer files' entries but none of
// its own, it is an older, settled, not full file with such a slot: Open
// must rebuild it, or the older entries of that slot are lost.
func TestSlotPastCountInOlderFileRebuilt(t *testing.T) {
	const slots = 4
	fs := vfs.NewMem()
	ix := openIndex(t, fs, slots, 1000)
	keys := []string{keyInSlot("a", 0, slots), keyInSlot("b", 1, slots), keyInSlot("c", 2, slots)}
	var m model
	for i := range 30 {
		m.put(t, ix, keys[i%len(keys)], int64(i)*100+1000, baseTs+int64(i)*10)
	}
	m.put(t, ix, keys[1], 500, baseTs+400) // backwards: starts file 2
	for i := range 10 {
		m.put(t, ix, keys[(i+1)%len(keys)], int64(i)*10+600, baseTs+int64(500+i))
	}
	m.put(t, ix, keys[2], 5, baseTs+600) // backwards: starts file 3
	for i := range 5 {
		m.put(t, ix, keys[i%len(keys)], int64(i)*10+10, baseTs+int64(700+i))
	}
	if len(ix.files) != 3 {
		t.Fatalf("%d files, want 3", len(ix.files))
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	f := &file{hdr: header{slotCount: slots}}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], 31) // file 1 holds 30 entries
	writeAt(t, fs, fileName(1), b[:], f.slotPos(0))
	fs.Crash()

	ix, lb := openLogged(t, fs, slots, 1000)
	defer ix.Close()
	checkAll(t, ix, &m, len(m.keys), keys)
	if !strings.Contains(lb.String(), "rebuilt the slot table") || !strings.Contains(lb.String(), fileName(1)) {
		t.Fatalf("file 1 was not rebuilt:\n%s", lb)
	}
}

// TestConcurrentPutFlushQueryCrash runs Put (rolling over every 700
// entries), Flush in a loop and Query together (run it with -race), and
// takes power-loss copies of the filesystem, strict and torn, at random
// moments of the Flushes: each must hold every key a completed Flush
// covered and nothing else. Queries meanwhile return only entries of their
// key, newest first.
func TestConcurrentPutFlushQueryCrash(t *testing.T) {
	for _, lazy := range []int{-1, 0} {
		name := map[int]string{-1: "eager", 0: "deferred"}[lazy]
		t.Run(name, func(t *testing.T) { testConcurrentPutFlushQueryCrashWith(t, lazy) })
	}
}

func testConcurrentPutFlushQueryCrashWith(t *testing.T, lazy int) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 17))
	const slots, maxEntries, nkeys, total = 20_000, 700, 500, 6000
	keys := keysOf(nkeys)
	keyOf := func(i int64) int { return int((uint64(i) * 0x9E3779B97F4A7C15 >> 40) % nkeys) }
	mem := vfs.NewMem()
	ix := openIndexLazy(t, mem, slots, maxEntries, lazy)
	var done, covered atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			n := done.Load()
			if err := ix.Flush(); err != nil {
				t.Error(err)
				return
			}
			covered.Store(n)
		}
	}()
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; !stop.Load(); j++ {
				k := (r*7 + j*13) % nkeys
				got, err := ix.Query(keys[k], 50, 0, 1<<62)
				if err != nil {
					t.Error(err)
					return
				}
				d := done.Load()
				for i, p := range got {
					if p%100 != 0 || keyOf(p/100) != k || p/100 > d || (i > 0 && p >= got[i-1]) {
						t.Errorf("query %s: %v", keys[k], got)
						return
					}
				}
			}
		}()
	}
	type crash struct {
		fs            *vfs.MemFS
		covered, puts int
		what          string
	}
	var crashes []crash
	var m model
	for i := range int64(total) {
		if err := ix.Put(keys[keyOf(i)], i*100, baseTs+i*10); err != nil {
			t.Fatal(err)
		}
		m.keys, m.phys, m.ts = append(m.keys, keys[keyOf(i)]), append(m.phys, i*100), append(m.ts, baseTs+i*10)
		done.Store(i + 1)
		if rng.IntN(300) == 0 {
			cov := int(covered.Load())
			crashes = append(crashes,
				crash{mem.CrashClone(), cov, int(i + 1), fmt.Sprintf("seed %d put %d strict", seed, i)},
				crash{mem.CrashCloneWith(rand.New(rand.NewPCG(seed, uint64(i)))), cov, int(i + 1), fmt.Sprintf("seed %d put %d torn", seed, i)})
		}
	}
	stop.Store(true)
	wg.Wait()
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	crashes = append(crashes, crash{mem.CrashClone(), total, total, "after Close"})
	for _, c := range crashes {
		checkCrashed(t, c.fs, slots, maxEntries, &m, c.covered, c.puts, keys, c.what)
	}
}
