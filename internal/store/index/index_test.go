package index

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

const (
	testDir = "/data/index"
	baseTs  = int64(1_700_000_000_000)
)

func openIndex(t testing.TB, fs vfs.FS, slots, maxEntries int) *Index {
	t.Helper()
	return openIndexLazy(t, fs, slots, maxEntries, 0)
}

// openIndexLazy opens an index with Config.LazySlotBlocks = lazy (-1:
// every Flush writes the changed slot blocks; the small tables of these
// tests otherwise defer them at almost every Flush).
func openIndexLazy(t testing.TB, fs vfs.FS, slots, maxEntries, lazy int) *Index {
	t.Helper()
	ix, err := Open(Config{FS: fs, Dir: testDir, HashSlots: slots, MaxEntries: maxEntries, LazySlotBlocks: lazy})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return ix
}

// model records what was put, to compute expected query answers.
type model struct {
	keys []string
	phys []int64
	ts   []int64
}

func (m *model) put(t testing.TB, ix *Index, key string, phys, ts int64) {
	t.Helper()
	if err := ix.Put(key, phys, ts); err != nil {
		t.Fatalf("put %s %d: %v", key, phys, err)
	}
	m.keys, m.phys, m.ts = append(m.keys, key), append(m.phys, phys), append(m.ts, ts)
}

// want returns the phys offsets of key among the first n puts, newest first,
// deduplicated.
func (m *model) want(key string, n int) []int64 {
	var out []int64
	for i := n - 1; i >= 0; i-- {
		if m.keys[i] == key && !slices.Contains(out, m.phys[i]) {
			out = append(out, m.phys[i])
		}
	}
	return out
}

func query(t testing.TB, ix *Index, key string) []int64 {
	t.Helper()
	got, err := ix.Query(key, 1_000_000, 0, 1<<62)
	if err != nil {
		t.Fatalf("query %s: %v", key, err)
	}
	return got
}

func checkAll(t testing.TB, ix *Index, m *model, n int, distinct []string) {
	t.Helper()
	for _, k := range distinct {
		if got, want := query(t, ix, k), m.want(k, n); !slices.Equal(got, want) {
			t.Fatalf("query %s = %v, want %v", k, got, want)
		}
	}
}

func testKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("TopicA#order-%d", i)
	}
	return keys
}

func TestPutQuery(t *testing.T) {
	ix := openIndex(t, vfs.NewMem(), 64, 1000)
	var m model
	keys := testKeys(10)
	for i := range 100 {
		m.put(t, ix, keys[i%10], int64(i)*100, baseTs+int64(i)*10)
	}
	m.put(t, ix, keys[3], 9900, baseTs+5000) // same record indexed again: deduplicated
	m.put(t, ix, keys[3], 9900, baseTs+5000)
	checkAll(t, ix, &m, len(m.keys), keys)
	if got, _ := ix.Query(keys[3], 2, 0, 1<<62); !slices.Equal(got, []int64{9900, 9300}) {
		t.Fatalf("max 2: %v", got)
	}
	if got := query(t, ix, "TopicA#missing"); len(got) != 0 {
		t.Fatalf("missing key: %v", got)
	}
	if got := ix.MaxPhysOffset(); got != 9900 {
		t.Fatalf("MaxPhysOffset %d", got)
	}
	if err := ix.Put("", 1, baseTs); err == nil {
		t.Fatal("empty key accepted")
	}
}

func TestManyCollisions(t *testing.T) {
	ix := openIndex(t, vfs.NewMem(), 3, 10_000)
	var m model
	keys := testKeys(300)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		m.put(t, ix, keys[rng.IntN(len(keys))], int64(i)*50, baseTs+int64(i))
	}
	checkAll(t, ix, &m, len(m.keys), keys)
}

func TestRolloverAndTimeRange(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 8, 10)
	var m model
	keys := testKeys(3)
	for i := range 35 {
		m.put(t, ix, keys[i%3], int64(i)*100, baseTs+int64(i)*1000) // one per second
	}
	names, _ := fs.List(testDir)
	if want := []string{fileName(1), fileName(2), fileName(3), fileName(4)}; !slices.Equal(names, want) {
		t.Fatalf("files %v", names)
	}
	checkAll(t, ix, &m, 35, keys)
	// Entries 10..19 are at baseTs+10s..19s; key 0 has i = 12, 15, 18.
	got, err := ix.Query(keys[0], 100, baseTs+10_000, baseTs+19_000)
	if err != nil || !slices.Equal(got, []int64{1800, 1500, 1200}) {
		t.Fatalf("time range: %v %v", got, err)
	}
	got, _ = ix.Query(keys[0], 100, baseTs+12_500, baseTs+12_600) // inside entry 12's second
	if !slices.Equal(got, []int64{1200}) {
		t.Fatalf("sub-second range: %v", got)
	}
	if got, _ := ix.Query(keys[0], 100, baseTs+100_000, baseTs+200_000); len(got) != 0 {
		t.Fatalf("range after all: %v", got)
	}
}

func TestRestart(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 8, 10)
	var m model
	keys := testKeys(4)
	for i := range 25 {
		m.put(t, ix, keys[i%4], int64(i)*100, baseTs+int64(i)*10)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ix.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if _, err := ix.Query(keys[0], 1, 0, 1<<62); !errors.Is(err, ErrClosed) {
		t.Fatalf("query after close: %v", err)
	}
	fs.Crash()
	ix = openIndex(t, fs, 8, 10)
	checkAll(t, ix, &m, 25, keys)
	if got := ix.MaxPhysOffset(); got != 2400 {
		t.Fatalf("MaxPhysOffset %d", got)
	}
	for i := 25; i < 40; i++ {
		m.put(t, ix, keys[i%4], int64(i)*100, baseTs+int64(i)*10)
	}
	checkAll(t, ix, &m, 40, keys)
}

func TestCrashDropsUnflushedAndRepairsChains(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 4, 1000)
	var m model
	keys := testKeys(6)
	for i := range 30 {
		m.put(t, ix, keys[i%6], int64(i)*100, baseTs+int64(i)*10)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 30; i < 45; i++ { // every slot gets a newer, unflushed head
		m.put(t, ix, keys[i%6], int64(i)*100, baseTs+int64(i)*10)
	}
	fs.Crash()
	ix = openIndex(t, fs, 4, 1000)
	checkAll(t, ix, &m, 30, keys)
	if got := ix.MaxPhysOffset(); got != 2900 {
		t.Fatalf("MaxPhysOffset %d", got)
	}
	// Re-index from MaxPhysOffset, as the store does (2900 again: a duplicate).
	for i := 29; i < 45; i++ {
		if err := ix.Put(m.keys[i], m.phys[i], m.ts[i]); err != nil {
			t.Fatal(err)
		}
	}
	checkAll(t, ix, &m, 45, keys)
}

// TestTornCrash: after a torn crash every answer is a subset of the truth
// and contains everything flushed; after re-indexing from MaxPhysOffset,
// answers are exact.
func TestTornCrash(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	keys := testKeys(12)
	for round := range rounds(40) {
		fs := vfs.NewMem()
		ix := openIndex(t, fs, 5, 16)
		var m model
		flushed := 0
		for range 4 {
			for range rng.IntN(15) {
				i := int64(len(m.keys))
				m.put(t, ix, keys[rng.IntN(len(keys))], i*100, baseTs+i*300)
			}
			if rng.IntN(2) == 0 {
				if err := ix.Flush(); err != nil {
					t.Fatal(err)
				}
				flushed = len(m.keys)
			}
		}
		if rng.IntN(3) == 0 {
			// A Flush that dies between writing a header and syncing it:
			// the crash may keep any prefix of the header bytes.
			efs := vfs.NewErrorFS(fs)
			ix.cfg.FS = efs // only Flush touches the FS from here
			for _, f := range ix.files {
				f.f = wrapFile(t, efs, f.f)
			}
			efs.Inject(vfs.Rule{Ops: vfs.OpSync, Skip: 1, Times: 1})
			_ = ix.Flush()
		}
		fs.CrashWith(rng)
		ix = openIndex(t, fs, 5, 16)
		for _, k := range keys {
			got, all, durable := query(t, ix, k), m.want(k, len(m.keys)), m.want(k, flushed)
			for _, p := range got {
				if !slices.Contains(all, p) {
					t.Fatalf("round %d: %s returned %d, never put", round, k, p)
				}
			}
			for _, p := range durable {
				if !slices.Contains(got, p) {
					t.Fatalf("round %d: %s lost flushed %d (got %v)", round, k, p, got)
				}
			}
		}
		from := ix.MaxPhysOffset()
		for i := range m.keys {
			if m.phys[i] >= from {
				if err := ix.Put(m.keys[i], m.phys[i], m.ts[i]); err != nil {
					t.Fatal(err)
				}
			}
		}
		checkAll(t, ix, &m, len(m.keys), keys)
	}
}

func TestTruncatePhys(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 4, 10)
	var m model
	keys := testKeys(5)
	for i := range 28 {
		m.put(t, ix, keys[i%5], int64(i)*100, baseTs+int64(i)*10)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := ix.TruncatePhys(1400); err != nil { // inside the second file
		t.Fatal(err)
	}
	checkAll(t, ix, &m, 14, keys)
	if got := ix.MaxPhysOffset(); got != 1300 {
		t.Fatalf("MaxPhysOffset %d", got)
	}
	fs.Crash()
	ix = openIndex(t, fs, 4, 10)
	checkAll(t, ix, &m, 14, keys)
	names, _ := fs.List(testDir)
	if len(names) != 2 {
		t.Fatalf("files %v", names)
	}
	m.keys, m.phys, m.ts = m.keys[:14], m.phys[:14], m.ts[:14]
	for i := 14; i < 30; i++ {
		m.put(t, ix, keys[(i+1)%5], int64(i)*100, baseTs+int64(i)*10)
	}
	checkAll(t, ix, &m, 30, keys)
	if err := ix.TruncatePhys(0); err != nil {
		t.Fatal(err)
	}
	if ix.MaxPhysOffset() != -1 || len(query(t, ix, keys[0])) != 0 {
		t.Fatal("index not empty after truncating everything")
	}
}

func TestDeleteBeforePhys(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 4, 10)
	var m model
	keys := testKeys(3)
	for i := range 35 {
		m.put(t, ix, keys[i%3], int64(i)*100, baseTs+int64(i)*10)
	}
	if err := ix.DeleteBeforePhys(2000); err != nil { // files 1 (..900) and 2 (..1900)
		t.Fatal(err)
	}
	names, _ := fs.List(testDir)
	if !slices.Equal(names, []string{fileName(3), fileName(4)}) {
		t.Fatalf("files %v", names)
	}
	for _, k := range keys {
		for _, p := range query(t, ix, k) {
			if p < 2000 {
				t.Fatalf("%s: deleted offset %d returned", k, p)
			}
		}
	}
	if err := ix.DeleteBeforePhys(1 << 40); err != nil {
		t.Fatal(err)
	}
	if names, _ := fs.List(testDir); !slices.Equal(names, []string{fileName(4)}) {
		t.Fatalf("newest file removed: %v", names)
	}
}

func TestInvalidEntryEndsChain(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 1, 100)
	for i := range 5 {
		if err := ix.Put("T#k", int64(i)*100, baseTs); err != nil {
			t.Fatal(err)
		}
	}
	if err := ix.Flush(); err != nil { // the entries leave the write-behind buffer
		t.Fatal(err)
	}
	// Make entry 3 point forward to itself: a loop without validation.
	f, err := fs.OpenFile(testDir+"/"+fileName(1), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	bad := entry{keyHash: KeyHash("T#k"), physOffset: 200, prevIndex: 3}
	var b [EntrySize]byte
	bad.encode(b[:])
	if _, err := f.WriteAt(b[:], HeaderSize+1*SlotSize+2*EntrySize); err != nil {
		t.Fatal(err)
	}
	got := query(t, ix, "T#k")
	if !slices.Equal(got, []int64{400, 300}) {
		t.Fatalf("query over a bad entry: %v", got)
	}
}

func TestBackwardsPhysStartsNewFile(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 4, 100)
	var m model
	m.put(t, ix, "T#a", 500, baseTs)
	m.put(t, ix, "T#a", 100, baseTs+1)
	names, _ := fs.List(testDir)
	if len(names) != 2 {
		t.Fatalf("files %v", names)
	}
	checkAll(t, ix, &m, 2, []string{"T#a"})
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	ix = openIndex(t, fs, 4, 100)
	checkAll(t, ix, &m, 2, []string{"T#a"})
}

func TestFlushErrorIsSticky(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	ix := openIndex(t, efs, 4, 100)
	if err := ix.Put("T#a", 1, baseTs); err != nil {
		t.Fatal(err)
	}
	efs.InjectOnce(vfs.OpSync, "/index/")
	if err := ix.Flush(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("flush: %v", err)
	}
	if err := ix.Flush(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("flush after a failed one: %v", err)
	}
}

func TestConcurrentQueryDuringPut(t *testing.T) {
	fs := vfs.NewMem()
	ix := openIndex(t, fs, 16, 500)
	keys := testKeys(8)
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if err := ix.Flush(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; !done.Load(); j++ {
				k := (r + j) % len(keys)
				got, err := ix.Query(keys[k], 50, 0, 1<<62)
				if err != nil {
					t.Error(err)
					return
				}
				for i, p := range got {
					if (p/100)%int64(len(keys)) != int64(k) || (i > 0 && p >= got[i-1]) {
						t.Errorf("query %s: %v", keys[k], got)
						return
					}
				}
			}
		}()
	}
	for i := range 3000 {
		if err := ix.Put(keys[i%len(keys)], int64(i)*100, baseTs+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	done.Store(true)
	wg.Wait()
}

// wrapFile reopens f's path through efs, so that its Sync goes through the
// error rules.
func wrapFile(t *testing.T, efs *vfs.ErrorFS, f vfs.File) vfs.File {
	t.Helper()
	g, err := efs.OpenFile(f.Name(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// rounds returns n, or 50 times n when KEEL_LONG=1.
func rounds(n int) int {
	if os.Getenv("KEEL_LONG") == "1" {
		return 50 * n
	}
	return n
}
