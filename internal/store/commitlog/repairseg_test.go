package commitlog

import (
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// RepairSegment repairs the damaged records of a segment before the part
// Recover verified (a hole record each, the rest kept) and nothing at or
// after limit; a segment without damage is left as it is.
func TestRepairSegmentBeforeTheVerifiedPart(t *testing.T) {
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	var all []appended
	for i := range 30 {
		all = append(all, appendAll(t, l, rec(300, byte(i)))...)
	}
	l.Flush()
	l.Close()
	// Records 2 and 5 of segment 0 damaged; Recover verifies from segment 2.
	patchFile(t, fs, "/data/commitlog/"+SegmentName(0), all[2].phys+100, func(b []byte) { b[0] ^= 1 })
	patchFile(t, fs, "/data/commitlog/"+SegmentName(0), all[5].phys, func(b []byte) { b[1] ^= 0x40 }) // its size
	l2, res := openLog(t, fs, RecoverOptions{From: 2 * testSeg})
	defer l2.Close()
	if res.ScannedFrom != 2*testSeg || len(res.Repaired) != 0 {
		t.Fatalf("recover %+v", res)
	}
	if rs, err := l2.RepairSegment(testSeg+10, res.ScannedFrom, "/data/quarantine"); err != nil || len(rs) != 0 {
		t.Fatalf("repair of a sound segment: %v %v", rs, err)
	}
	rs, err := l2.RepairSegment(all[2].phys, res.ScannedFrom, "/data/quarantine")
	if err != nil || len(rs) != 2 || rs[0].Offset != all[2].phys || rs[1].Offset != all[5].phys {
		t.Fatalf("repairs %v %v, want the records at %d and %d", rs, err, all[2].phys, all[5].phys)
	}
	var kept []appended
	for i, a := range all {
		if i != 2 && i != 5 {
			kept = append(kept, a)
		}
	}
	checkReadable(t, l2, kept)
	for _, i := range []int{2, 5} {
		if _, err := l2.ReadRecord(all[i].phys, nil); !IsHole(err) {
			t.Fatalf("repaired record %d: %v", i, err)
		}
	}
	if _, probs, err := l2.Verify(nil); err != nil || len(probs) != 0 {
		t.Fatalf("verify after the repair: %v %v", probs, err)
	}
	if names, _ := fs.List("/data/quarantine"); len(names) != 2 {
		t.Fatalf("quarantine %v, want the two damaged ranges", names)
	}
}
