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
