package commitlog

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// scrubLog is a recovered log of records of varying sizes over several
// segments.
func scrubLog(t testing.TB) (vfs.FS, *Log, []appended) {
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	var recs [][]byte
	for i := range 40 {
		recs = append(recs, rec(100+(i*37)%500, byte(i)))
	}
	return fs, l, appendAll(t, l, recs...)
}

// scrubAll runs a Scrubber to the written offset in steps of step bytes
// and returns the offsets it visited and the findings.
func scrubAll(t testing.TB, l *Log, step int64) (map[int64][]byte, []ScrubFinding) {
	visited := map[int64][]byte{}
	var found []ScrubFinding
	sc := l.NewScrubber(0)
	defer sc.Close()
	limit := l.WrittenOffset()
	for i := 0; ; i++ {
		if i > 100000 {
			t.Fatal("the scrubber does not reach the end")
		}
		before := sc.Offset()
		n, err := sc.Step(limit, step, func(phys int64, r []byte) {
			if _, dup := visited[phys]; dup {
				t.Fatalf("record at %d visited twice", phys)
			}
			visited[phys] = append([]byte(nil), r...)
		}, func(f ScrubFinding) { found = append(found, f) })
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			if sc.Offset() < limit {
				t.Fatalf("stopped at %d before %d", sc.Offset(), limit)
			}
			return visited, found
		}
		if sc.Offset() < before {
			t.Fatalf("went back from %d to %d", before, sc.Offset())
		}
	}
}

func TestScrubberVisitsEveryRecordInAnyStep(t *testing.T) {
	_, l, want := scrubLog(t)
	defer l.Close()
	for _, step := range []int64{1, 64, 700, testSeg, 1 << 20} {
		visited, found := scrubAll(t, l, step)
		if len(found) != 0 || len(visited) != len(want) {
			t.Fatalf("step %d: %d visited of %d, findings %v", step, len(visited), len(want), found)
		}
		for _, a := range want {
			if !bytes.Equal(visited[a.phys], a.rec) {
				t.Fatalf("step %d: record at %d differs", step, a.phys)
			}
		}
	}
}

// FuzzScrubber damages a sound log at rest: the scrubber must not panic,
// must reach the end, must visit only records that are intact, and must
// visit every record of the segments the damage did not touch (after
// damage it resumes at the next valid entry of the segment, or at the next
// segment).
func FuzzScrubber(f *testing.F) {
	f.Add([]byte{}, int64(512))
	f.Add([]byte{0, 0, 0, 200, 0x40}, int64(64))
	f.Add([]byte{0, 0, 1, 0, 0xff, 0, 0, 1, 1, 0xff, 0, 0, 1, 2, 0xff}, int64(testSeg))
	f.Fuzz(func(t *testing.T, damage []byte, step int64) {
		fs, l, want := scrubLog(t)
		defer l.Close()
		step = max(step%(2*testSeg), 1)
		flips := map[int64]byte{} // offset -> xor mask (two flips of a byte may cancel)
		for i := 0; i+5 <= len(damage) && i < 5*16; i += 5 {
			off := int64(binary.BigEndian.Uint32(damage[i:])) % l.WrittenOffset()
			seg := off - off%testSeg
			if fi, err := fs.Stat("/data/commitlog/" + SegmentName(seg)); err != nil || off-seg >= fi.Size() {
				continue // past a closed segment's file: nothing there to damage
			}
			flips[off] ^= damage[i+4]
		}
		touched := map[int64]bool{}    // records a damaged byte falls in
		damagedSeg := map[int64]bool{} // segments with any damaged byte
		for off, mask := range flips {
			if mask == 0 {
				continue
			}
			seg := off - off%testSeg
			damagedSeg[seg] = true
			patchFile(t, fs, "/data/commitlog/"+SegmentName(seg), off-seg, func(b []byte) { b[0] ^= mask })
			for _, a := range want {
				if off >= a.phys && off < a.phys+int64(len(a.rec))+TrailerBytes {
					touched[a.phys] = true
				}
			}
		}
		visited, found := scrubAll(t, l, step)
		intact := map[int64][]byte{}
		for _, a := range want {
			intact[a.phys] = a.rec
		}
		for phys, r := range visited {
			if !bytes.Equal(r, intact[phys]) || touched[phys] {
				t.Fatalf("visited a damaged record at %d", phys)
			}
		}
		for _, a := range want {
			if _, ok := visited[a.phys]; !ok && !damagedSeg[a.phys-a.phys%testSeg] {
				t.Fatalf("record at %d in an undamaged segment not visited (findings %v)", a.phys, found)
			}
		}
		if len(damagedSeg) == 0 && len(found) != 0 {
			t.Fatalf("findings without damage: %v", found)
		}
		for _, fd := range found {
			if fd.Next <= fd.Offset {
				t.Fatalf("finding %+v does not move forward", fd)
			}
		}
	})
}
