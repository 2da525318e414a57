package index

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// putRange puts keys[i%len(keys)] at physOffset i*100, time baseTs+i, for
// i in [from, to).
func (m *model) putRange(t *testing.T, ix *Index, keys []string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		m.put(t, ix, keys[i%len(keys)], int64(i)*100, baseTs+int64(i))
	}
}

// openDeferred opens an index on fs, puts 1000 entries over 400 keys
// (they change most blocks of a 70,000-slot table) and flushes, which
// defers the slot blocks.
func openDeferred(t *testing.T, fs vfs.FS, slots, maxEntries int) (*Index, []string, *model) {
	t.Helper()
	ix := openIndex(t, fs, slots, maxEntries)
	keys := keysOf(400)
	m := &model{}
	m.putRange(t, ix, keys, 0, 1000)
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if ix.files[0].marker == 0 {
		t.Fatal("setup: the Flush did not defer the slot blocks")
	}
	return ix, keys, m
}

// reopenCrashed opens a crash copy of mem, checks every key against m's
// first n puts and whether the open rebuilt a slot table, and closes it.
func reopenCrashed(t *testing.T, mem *vfs.MemFS, slots, maxEntries int, m *model, n int, keys []string, rebuilds int) {
	t.Helper()
	ix, lb := openLogged(t, mem.CrashClone(), slots, maxEntries)
	checkAll(t, ix, m, n, keys)
	if got := strings.Count(lb.String(), "rebuilt the slot table"); got != rebuilds {
		t.Fatalf("%d slot tables rebuilt, want %d:\n%s", got, rebuilds, lb)
	}
	_ = ix.Close()
}

// TestDeferredSlotBlocks: while most of the table changes between Flushes,
// a Flush writes the entries and the header but not the slot blocks, and
// leaves the durable file not settled, so a crash rebuilds the table from
// the entries. A Flush that finds no new entry writes the deferred blocks
// and settles the file; so do Close and a roll-over.
func TestDeferredSlotBlocks(t *testing.T) {
	const slots = 70_000 // 69 blocks
	mem := vfs.NewMem()
	cfs := &countFS{FS: mem}
	ix := openIndex(t, cfs, slots, 100_000)
	keys := keysOf(400) // land in most blocks
	var m model
	m.putRange(t, ix, keys, 0, 1000)
	f := ix.files[0]
	dirty := f.dirtyBlocks.count()
	if dirty*lazyFraction <= f.blockOf(slots-1)+1 {
		t.Fatalf("setup: only %d dirty blocks", dirty)
	}
	w0 := cfs.writes.Load()
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	// The last batch of entries, the marker, the header: no slot block.
	if got := cfs.writes.Load() - w0; got != 3 {
		t.Fatalf("deferring Flush made %d writes, want 3", got)
	}
	if got := f.dirtyBlocks.count(); got != dirty {
		t.Fatalf("%d blocks still marked, want the %d deferred", got, dirty)
	}
	if size, settled := indexFileSize(t, mem, 1), f.entryPos(1001); size != settled+1 {
		t.Fatalf("file size %d, want %d (entries and a marker byte)", size, settled+1)
	}
	// A crash now: the header counts all 1000 entries, the durable table
	// has none of their slots; Open rebuilds it.
	reopenCrashed(t, mem, slots, 100_000, &m, 1000, keys, 1)

	// More entries, still deferred; the marker moves behind them.
	m.putRange(t, ix, keys, 1000, 1500)
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if size := indexFileSize(t, mem, 1); size != f.entryPos(1501)+1 {
		t.Fatalf("file size %d after the second deferring Flush", size)
	}

	// No new entry: the deferred blocks are written and the file settles.
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := f.dirtyBlocks.count(); got != 0 {
		t.Fatalf("%d blocks still marked after the catching-up Flush", got)
	}
	if size := indexFileSize(t, mem, 1); size != f.entryPos(1501) {
		t.Fatalf("file size %d, want %d: not settled after the catching-up Flush", size, f.entryPos(1501))
	}
	reopenCrashed(t, mem, slots, 100_000, &m, 1500, keys, 0)

	// Deferred again, then Close: settled, nothing to rebuild.
	m.putRange(t, ix, keys, 1500, 2500)
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if f.marker == 0 {
		t.Fatal("setup: the Flush before Close did not defer")
	}
	if err := ix.Close(); err != nil {
		t.Fatal(err)
	}
	if size := indexFileSize(t, mem, 1); size != f.entryPos(2501) {
		t.Fatalf("file size %d after Close, want %d", size, f.entryPos(2501))
	}
	reopenCrashed(t, mem, slots, 100_000, &m, 2500, keys, 0)
}

// TestDeferredSlotBlocksRollOver: a file left with deferred blocks when it
// fills up gets every block written at the roll-over and is settled by the
// next Flush; the new file takes over the deferring.
func TestDeferredSlotBlocksRollOver(t *testing.T) {
	const slots, maxEntries = 70_000, 1200
	mem := vfs.NewMem()
	ix, keys, m := openDeferred(t, mem, slots, maxEntries)
	m.putRange(t, ix, keys, 1000, 2000) // rolls over at 1200
	if len(ix.files) != 2 {
		t.Fatalf("%d files", len(ix.files))
	}
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if size := indexFileSize(t, mem, 1); size != ix.files[0].entryPos(maxEntries+1) {
		t.Fatalf("the full file is %d bytes: not settled after the roll-over's Flush", size)
	}
	reopenCrashed(t, mem, slots, maxEntries, m, 2000, keys, 1) // the newer file, deferring
	_ = ix.Close()
}

// TestFewChangedBlocksNotDeferred: a Flush that finds few changed blocks
// writes them, as at low rates.
func TestFewChangedBlocksNotDeferred(t *testing.T) {
	const slots = 70_000
	mem := vfs.NewMem()
	ix := openIndex(t, mem, slots, 100_000)
	var m model
	keys := keysOf(5)
	m.putRange(t, ix, keys, 0, 300)
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	if f := ix.files[0]; f.marker != 0 || f.dirtyBlocks.count() != 0 {
		t.Fatalf("marker %d, %d blocks left marked: deferred with 5 changed blocks", f.marker, f.dirtyBlocks.count())
	}
	if size := indexFileSize(t, mem, 1); size != ix.files[0].entryPos(301) {
		t.Fatalf("file size %d: not settled", size)
	}
	_ = ix.Close()
}

// TestRebuildLeavesSlotBlocksToFlush: after a crash, the file taking Puts
// gets its rebuilt table as its cached table with the differing blocks
// marked, and Open writes none of them (the whole table after a crash under
// load). The file stays not settled, so a second crash before a Flush
// rebuilds it again; the Flush that writes the blocks settles it. With
// LazySlotBlocks < 0 Open writes the table itself, as for older files.
func TestRebuildLeavesSlotBlocksToFlush(t *testing.T) {
	const slots, maxEntries = 70_000, 100_000
	mem := vfs.NewMem()
	ix, keys, m := openDeferred(t, mem, slots, maxEntries) // the durable table is empty
	settled := ix.files[0].entryPos(1001)

	t.Run("eager", func(t *testing.T) {
		cfs := &countFS{FS: mem.CrashClone()}
		ix, err := Open(Config{FS: cfs, Dir: testDir, HashSlots: slots, MaxEntries: maxEntries, LazySlotBlocks: -1})
		if err != nil {
			t.Fatal(err)
		}
		defer ix.Close()
		if got := cfs.bytes.Load(); got < 400*SlotSize {
			t.Fatalf("Open wrote %d bytes, want at least the 400 rebuilt slots", got)
		}
		if size := indexFileSize(t, cfs, 1); size != settled {
			t.Fatalf("file size %d after an eager rebuild, want %d (settled)", size, settled)
		}
		checkAll(t, ix, m, 1000, keys)
	})

	crashed := mem.CrashClone()
	cfs := &countFS{FS: crashed}
	var lb logBuffer
	ix2, err := Open(Config{FS: cfs, Dir: testDir, HashSlots: slots, MaxEntries: maxEntries,
		Logger: slog.New(slog.NewTextHandler(&lb, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lb.String(), "slots_written_later=true") {
		t.Fatalf("Open did not leave the rebuilt slots for later:\n%s", lb.String())
	}
	if got := cfs.bytes.Load(); got >= slotBlockSize {
		t.Fatalf("Open wrote %d bytes, want less than one slot block", got)
	}
	f := ix2.files[0]
	if f.dirtyBlocks.count() == 0 || f.marker != 1000 {
		t.Fatalf("after the rebuild %d blocks marked, marker %d; want blocks and marker 1000", f.dirtyBlocks.count(), f.marker)
	}
	if size := indexFileSize(t, crashed, 1); size != settled+1 {
		t.Fatalf("file size %d, want %d (entries and a marker byte)", size, settled+1)
	}
	checkAll(t, ix2, m, 1000, keys) // from the rebuilt table in memory

	// A crash before any Flush: rebuilt again, nothing lost.
	reopenCrashed(t, crashed, slots, maxEntries, m, 1000, keys, 1)

	// The next Flush (no new entry) writes the blocks and settles the file.
	if err := ix2.Flush(); err != nil {
		t.Fatal(err)
	}
	if size := indexFileSize(t, crashed, 1); size != settled {
		t.Fatalf("file size %d after the Flush, want %d (settled)", size, settled)
	}
	reopenCrashed(t, crashed, slots, maxEntries, m, 1000, keys, 0)

	// Puts continue on the cached table across the rebuild.
	m.putRange(t, ix2, keys, 1000, 1200)
	if err := ix2.Close(); err != nil {
		t.Fatal(err)
	}
	reopenCrashed(t, crashed, slots, maxEntries, m, 1200, keys, 0)
}
