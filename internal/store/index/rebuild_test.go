package index

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// keyInSlot returns a key of the form T#<prefix><i> whose slot (of slots)
// is slot.
func keyInSlot(prefix string, slot, slots int) string {
	for i := 0; ; i++ {
		k := "T#" + prefix + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
		if int(KeyHash(k))%slots == slot {
			return k
		}
	}
}

// logBuffer is a slog handler target that tests can search.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func openLogged(t testing.TB, fs vfs.FS, slots, maxEntries int) (*Index, *logBuffer) {
	t.Helper()
	var lb logBuffer
	ix, err := Open(Config{FS: fs, Dir: testDir, HashSlots: slots, MaxEntries: maxEntries,
		Logger: slog.New(slog.NewTextHandler(&lb, nil))})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return ix, &lb
}

func writeAt(t *testing.T, fs vfs.FS, name string, b []byte, off int64) {
	t.Helper()
	f, err := fs.OpenFile(testDir+"/"+name, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// TestTornSlotRebuilt reproduces a torn 4-byte slot write deterministically:
// slot A's durable head is entry 256 (0x00000100); a Put of entry 601
// (0x00000259) updates it and the crash keeps the first 3 bytes of that
// write, so the slot reads 0x00000200 = 512, an entry of another slot that is
// covered by the durable header. Recovery must not keep that value: every
// key of the 600 flushed entries stays findable.
func TestTornSlotRebuilt(t *testing.T) {
	const slots = 4
	fs := vfs.NewMem()
	ix := openIndex(t, fs, slots, 10_000)
	keyA := keyInSlot("a", 0, slots)
	others := []string{keyInSlot("b", 1, slots), keyInSlot("c", 2, slots), keyInSlot("d", 3, slots), keyInSlot("e", 1, slots)}
	var m model
	for i := 1; i <= 600; i++ {
		k := others[i%len(others)]
		if i <= 256 && i%5 == 0 || i == 256 {
			k = keyA
		}
		m.put(t, ix, k, int64(i)*100, baseTs+int64(i)*10)
	}
	if got := query(t, ix, keyA); len(got) == 0 || got[0] != 25600 {
		t.Fatalf("setup: key A's newest entry is %v, want 25600 first", got)
	}
	if m.keys[511] == keyA { // entry 512 must belong to another slot
		t.Fatal("setup: entry 512 is key A's")
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	m.put(t, ix, keyA, 60100, baseTs+6010) // entry 601
	f := ix.files[0]
	if err := f.writeAllPending(); err != nil { // entry 601, then slot A = 601
		t.Fatal(err)
	}
	// What survives of that slot write: its first 3 bytes (00 00 02) over
	// the old value 00 00 01 00.
	writeAt(t, fs, f.name, []byte{0, 0, 2, 0}, f.slotPos(0))
	fs.Crash()

	ix, lb := openLogged(t, fs, slots, 10_000)
	keys := append([]string{keyA}, others...)
	checkAll(t, ix, &m, 600, keys)
	if got := ix.MaxPhysOffset(); got != 60000 {
		t.Fatalf("MaxPhysOffset %d, want 60000", got)
	}
	if !strings.Contains(lb.String(), "rebuilt the slot table") {
		t.Fatalf("no rebuild logged:\n%s", lb)
	}
	// Re-indexing continues the rebuilt chains.
	for i := 600; i <= 620; i++ {
		m.put(t, ix, keyA, int64(i)*100, baseTs+int64(i)*10)
	}
	checkAll(t, ix, &m, len(m.keys), keys)
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	ix, lb = openLogged(t, fs, slots, 10_000)
	checkAll(t, ix, &m, len(m.keys), keys)
	if strings.Contains(lb.String(), "rebuilt") {
		t.Fatalf("a clean close was followed by a rebuild:\n%s", lb)
	}
	_ = ix.Close()
}

// TestRebuildRepairsPrevIndex: an entry whose prevIndex disagrees with the
// chain rebuilt from the entries (as an earlier torn slot could leave behind:
// a Put linked to the wrong head) is relinked, durably, so the older keys of
// its slot are found again.
func TestRebuildRepairsPrevIndex(t *testing.T) {
	const slots = 3
	fs := vfs.NewMem()
	ix := openIndex(t, fs, slots, 1000)
	keys := []string{keyInSlot("a", 0, slots), keyInSlot("b", 0, slots), keyInSlot("c", 1, slots), keyInSlot("d", 2, slots)}
	var m model
	for i := range 40 {
		m.put(t, ix, keys[i%len(keys)], int64(i)*100, baseTs+int64(i)*10)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	// Entry 37 (keys[0], slot 0) links to entry 2 (keys[1], slot 0) instead
	// of entry 34: slot 0's entries 3..34 become unreachable.
	f := &file{hdr: header{slotCount: slots}}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], 2)
	writeAt(t, fs, fileName(1), b[:], f.entryPos(37)+16)
	// The crash signal: entries beyond the durable header's count.
	writeAt(t, fs, fileName(1), make([]byte, EntrySize), f.entryPos(41))
	fs.Crash()

	ix, lb := openLogged(t, fs, slots, 1000)
	checkAll(t, ix, &m, 40, keys)
	if !strings.Contains(lb.String(), "relinked=1") {
		t.Fatalf("the relink was not logged:\n%s", lb)
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	ix = openIndex(t, fs, slots, 1000)
	checkAll(t, ix, &m, 40, keys)
	_ = ix.Close()
}

// TestTornCrashWideSlots is TestTornCrash with files of hundreds of entries,
// so slot values differ in more than their last byte and a torn slot write
// can leave a plausible wrong value: after every crash each flushed key must
// still be found.
func TestTornCrashWideSlots(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	// Skewed keys over many slots: most slots are updated rarely, so their
	// durable head is often hundreds of entries old when a Put tears them.
	keys := testKeys(150)
	const slots, maxEntries = 61, 900
	for round := range rounds(40) {
		fs := vfs.NewMem()
		ix := openIndex(t, fs, slots, maxEntries)
		var m model
		flushed := 0
		for range 2 + rng.IntN(3) {
			for range 5 {
				for range 50 + rng.IntN(300) {
					i := int64(len(m.keys))
					m.put(t, ix, keys[rng.IntN(1+rng.IntN(len(keys)))], i*100, baseTs+i*300)
				}
				if rng.IntN(2) == 0 {
					if err := ix.Flush(); err != nil {
						t.Fatal(err)
					}
					flushed = len(m.keys)
				}
			}
			fs.CrashWith(rng)
			if rng.IntN(3) == 0 {
				// Another crash in the middle of recovery: its writes tear too.
				efs := vfs.NewErrorFS(fs)
				efs.Inject(vfs.Rule{Ops: vfs.OpSync, Path: "/index/", Skip: rng.IntN(3), Times: 1})
				_, _ = Open(Config{FS: efs, Dir: testDir, HashSlots: slots, MaxEntries: maxEntries})
				fs.CrashWith(rng)
			}
			ix = openIndex(t, fs, slots, maxEntries)
			for _, k := range keys {
				got, all, durable := query(t, ix, k), m.want(k, len(m.keys)), m.want(k, flushed)
				for _, p := range got {
					if !slices.Contains(all, p) {
						t.Fatalf("seed %d round %d: %s returned %d, never put", seed, round, k, p)
					}
				}
				for _, p := range durable {
					if !slices.Contains(got, p) {
						t.Fatalf("seed %d round %d: %s lost flushed %d (got %v)", seed, round, k, p, got)
					}
				}
			}
			// Re-index from MaxPhysOffset as the store does.
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
		_ = ix.Close()
	}
}

// TestSlotPastEntriesRebuilt: a disk that reorders unsynced writes can keep a
// slot update without the entry it points at, in a file whose size matches
// its header. For the newest file, and for the one before it when it is not
// full, that slot must not cut the older chain.
func TestSlotPastEntriesRebuilt(t *testing.T) {
	const slots = 4
	fs := vfs.NewMem()
	ix := openIndex(t, fs, slots, 1000)
	keys := []string{keyInSlot("a", 0, slots), keyInSlot("b", 1, slots), keyInSlot("c", 2, slots)}
	var m model
	for i := range 30 {
		m.put(t, ix, keys[i%len(keys)], int64(i)*100+1000, baseTs+int64(i)*10)
	}
	m.put(t, ix, keys[0], 5, baseTs+400) // backwards: starts file 2
	for i := range 10 {
		m.put(t, ix, keys[(i+1)%len(keys)], int64(i)*100+10, baseTs+int64(500+i))
	}
	if len(ix.files) != 2 {
		t.Fatalf("%d files, want 2", len(ix.files))
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	f := &file{hdr: header{slotCount: slots}}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], 31) // file 1 holds 30 entries
	writeAt(t, fs, fileName(1), b[:], f.slotPos(0))
	binary.BigEndian.PutUint32(b[:], 12) // file 2 holds 11 entries
	writeAt(t, fs, fileName(2), b[:], f.slotPos(1))
	fs.Crash()

	ix, lb := openLogged(t, fs, slots, 1000)
	checkAll(t, ix, &m, len(m.keys), keys)
	if n := strings.Count(lb.String(), "rebuilt the slot table"); n != 2 {
		t.Fatalf("%d rebuilds logged, want 2:\n%s", n, lb)
	}
	_ = ix.Close()
}

// TestCrashDuringTruncatePhys: TruncatePhys rewrites slots in place; a crash
// before its final fdatasync, tearing those writes anywhere, must leave
// every entry below the cut findable.
func TestCrashDuringTruncatePhys(t *testing.T) {
	t.Run("eager", func(t *testing.T) { crashDuringTruncatePhys(t, -1, 2) })
	// A file whose slot blocks were deferred is not settled already: no
	// unsettling byte, so the final fdatasync is the second.
	t.Run("deferred", func(t *testing.T) { crashDuringTruncatePhys(t, 0, 1) })
}

func crashDuringTruncatePhys(t *testing.T, lazy, skipSyncs int) {
	const slots = 4
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	ix := openIndexLazy(t, efs, slots, 10_000, lazy)
	keys := []string{keyInSlot("a", 0, slots), keyInSlot("b", 1, slots), keyInSlot("c", 2, slots), keyInSlot("d", 3, slots)}
	var m model
	for i := range 700 {
		k := keys[i%len(keys)]
		if i > 200 && k == keys[0] {
			k = keys[1] // slot 0's head stays below 256 until the cut's tail
		}
		if i >= 650 {
			k = keys[0]
		}
		m.put(t, ix, k, int64(i)*100, baseTs+int64(i)*10)
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	// Syncs of TruncatePhys: pending entries, the unsettling byte (eager
	// only), the end.
	efs.Inject(vfs.Rule{Ops: vfs.OpSync, Path: "/index/", Skip: skipSyncs, Times: 1})
	if err := ix.TruncatePhys(620 * 100); err == nil {
		t.Fatal("TruncatePhys succeeded despite a failed fdatasync")
	}
	for seed := range uint64(50) {
		fs := mem.CrashCloneWith(rand.New(rand.NewPCG(seed, 11)))
		ix := openIndex(t, fs, slots, 10_000)
		for _, k := range keys {
			got, want := query(t, ix, k), m.want(k, 620)
			for _, p := range want {
				if !slices.Contains(got, p) {
					t.Fatalf("seed %d: %s lost %d (got %v)", seed, k, p, got)
				}
			}
			for _, p := range got {
				if !slices.Contains(m.want(k, 700), p) {
					t.Fatalf("seed %d: %s returned %d, never put", seed, k, p)
				}
			}
		}
		_ = ix.Close()
	}
}

// TestDamagedEndPhysIgnored: Open takes a settled file's header as it is,
// except its end fields, which it checks against the last entry: a damaged
// endPhys would misreport MaxPhysOffset (where the store re-indexes from)
// and make a later Put fail (found by FuzzRecover).
func TestDamagedEndPhysIgnored(t *testing.T) {
	for _, bad := range []int64{-2305843013508661137, 1 << 60} {
		mem := vfs.NewMem()
		ix := openIndex(t, mem, 64, 1000)
		var m model
		keys := keysOf(5)
		for i := range 20 {
			m.put(t, ix, keys[i%len(keys)], 1000+int64(i)*10, baseTs+int64(i))
		}
		if err := ix.Close(); err != nil {
			t.Fatal(err)
		}
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(bad))
		writeAt(t, mem, fileName(1), b[:], 24) // endPhys
		ix = openIndex(t, mem, 64, 1000)
		if got := ix.MaxPhysOffset(); got != 1190 {
			t.Fatalf("endPhys %d in the header: MaxPhysOffset %d, want 1190 (the last entry)", bad, got)
		}
		checkAll(t, ix, &m, 20, keys)
		m.put(t, ix, keys[0], 1200, baseTs+20)
		checkAll(t, ix, &m, 21, keys)
		_ = ix.Close()
	}
}
