package index

import (
	"errors"
	"syscall"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// A write that fails for lack of space (entries, slots or the header of a
// Flush) is retried by the next Flush; a failed fdatasync stays sticky.
func TestFlushRetriesFailedWrites(t *testing.T) {
	for skip := range 3 { // 0: entries, 1: slot, 2: header after the first sync
		mem := vfs.NewMem()
		efs := vfs.NewErrorFS(mem)
		ix := openIndex(t, efs, 16, 100)
		if err := ix.Put("T#a", 100, baseTs); err != nil {
			t.Fatal(err)
		}
		efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "/index/", Skip: skip, Times: 1, Err: syscall.ENOSPC})
		if err := ix.Flush(); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("write %d: flush on a full disk: %v", skip, err)
		}
		if err := ix.Flush(); err != nil {
			t.Fatalf("write %d: flush after space returned: %v", skip, err)
		}
		ix.Close()
		ix = openIndex(t, mem.CrashClone(), 16, 100)
		if got := query(t, ix, "T#a"); len(got) != 1 || got[0] != 100 {
			t.Fatalf("write %d: after a power loss: %v", skip, got)
		}
		ix.Close()
	}

	efs := vfs.NewErrorFS(vfs.NewMem())
	ix := openIndex(t, efs, 16, 100)
	defer ix.Close()
	if err := ix.Put("T#a", 100, baseTs); err != nil {
		t.Fatal(err)
	}
	efs.Inject(vfs.Rule{Ops: vfs.OpSync, Path: "/index/", Times: 1, Err: syscall.ENOSPC})
	if err := ix.Flush(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush with a failing fdatasync: %v", err)
	}
	if err := ix.Flush(); err == nil {
		t.Fatal("a failed fdatasync is not sticky")
	}
}

// A slot block write that fails for lack of space stays due: a roll-over
// before the next Flush writes it before the table is dropped.
func TestFailedSlotWriteThenRollOver(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	const slots = 4096 // blocks 0..4
	ix := openIndex(t, efs, slots, 50)
	var m model
	// The first keys' slots are in block 0, the later ones' in block 3, so
	// the roll-over has only the failed write to make up for block 0.
	probe := &file{hdr: header{slotCount: slots}}
	var first, later []string
	for _, k := range keysOf(2000) {
		switch probe.blockOf(probe.slotOf(KeyHash(k))) {
		case 0:
			first = append(first, k)
		case 3:
			later = append(later, k)
		}
	}
	keys := append(first[:20:20], later[:20]...)
	for i := range 30 {
		m.put(t, ix, keys[i%20], int64(i)*100, baseTs+int64(i))
	}
	// Writes of the Flush: the entries, then the slot blocks.
	efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "/index/", Skip: 1, Times: 1, Err: syscall.ENOSPC})
	if err := ix.Flush(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("flush on a full disk: %v", err)
	}
	for i := 30; i < 60; i++ { // rolls over at 50
		m.put(t, ix, keys[20+i%20], int64(i)*100, baseTs+int64(i))
	}
	if len(ix.files) != 2 {
		t.Fatalf("%d files, want 2", len(ix.files))
	}
	checkAll(t, ix, &m, 60, keys)
	if err := ix.Flush(); err != nil {
		t.Fatal(err)
	}
	mem.Crash()
	ix = openIndex(t, mem, slots, 50)
	defer ix.Close()
	checkAll(t, ix, &m, 60, keys)
}
