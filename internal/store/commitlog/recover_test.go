package commitlog

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// stampedLog is a closed log whose records carry their own CommitLog offset
// in the PHYSICALOFFSET field, as the store's records do.
func stampedLog(t *testing.T, sizes ...int) (*vfs.MemFS, []appended) {
	t.Helper()
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	var recs [][]byte
	for i, n := range sizes {
		recs = append(recs, rec(n, byte(i)))
	}
	var all []appended
	if _, err := l.Append(recs, func(_ int, r []byte, phys int64) {
		binary.BigEndian.PutUint64(r[28:], uint64(phys))
		all = append(all, appended{phys: phys, rec: append([]byte(nil), r...)})
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	l.Close()
	return fs, all
}

// sizes fills four segments of testSeg (the last with 8 records) with
// records of 300 to 390 bytes.
func sizes() []int {
	var out []int
	for i := range 41 {
		out = append(out, 300+i%10*10)
	}
	return out
}

func logEnd(all []appended) int64 {
	last := all[len(all)-1]
	return last.phys + int64(len(last.rec)) + TrailerBytes
}

func TestRecoverFromResumePoint(t *testing.T) {
	fs, all := stampedLog(t, sizes()...)
	end := logEnd(all)
	lastBase := end - end%testSeg
	var k int // a record in the last segment, not its first
	for k = len(all) - 1; all[k-1].phys > lastBase; k-- {
	}
	l, res := openLog(t, fs, RecoverOptions{From: end, DurableFrom: end, Resume: all[k].phys})
	defer l.Close()
	if res.End != end || res.ScannedFrom != all[k].phys || res.Records != len(all)-k {
		t.Fatalf("end %d from %d records %d, want %d %d %d", res.End, res.ScannedFrom, res.Records, end, all[k].phys, len(all)-k)
	}
	checkReadable(t, l, all)
	more := appendAll(t, l, rec(100, 9))
	if more[0].phys != end {
		t.Fatalf("next append at %d, want %d", more[0].phys, end)
	}
}

// After a crash the checkpointed flushed offset can lie in an earlier
// segment than the end: the scan from the resume point goes on through the
// later segments.
func TestRecoverFromResumePointAcrossSegments(t *testing.T) {
	fs, all := stampedLog(t, sizes()...)
	end := logEnd(all)
	from := all[5].phys // in the first segment
	l, res := openLog(t, fs, RecoverOptions{From: from, DurableFrom: from, Crashed: true, Resume: all[2].phys})
	defer l.Close()
	if res.End != end || res.ScannedFrom != all[2].phys || res.Records != len(all)-2 {
		t.Fatalf("end %d from %d records %d, want %d %d %d", res.End, res.ScannedFrom, res.Records, end, all[2].phys, len(all)-2)
	}
}

// A resume point that is not where a record starts, or that no valid log
// follows, only costs a scan of the whole segment: the outcome is the one
// without it.
func TestRecoverIgnoresABadResumePoint(t *testing.T) {
	type setup func(t *testing.T, fs *vfs.MemFS, all []appended) (resume int64)
	seg := func(all []appended, i int) string {
		return "/data/commitlog/" + SegmentName(all[i].phys-all[i].phys%testSeg)
	}
	cases := map[string]setup{
		"inside a record": func(t *testing.T, fs *vfs.MemFS, all []appended) int64 { return all[len(all)-3].phys + 12 },
		"beyond the end":  func(t *testing.T, fs *vfs.MemFS, all []appended) int64 { return logEnd(all) + 8 },
		// A valid entry hidden in a record's body, as a producer could
		// send: its CRC matches, but it does not name its own offset.
		"entry inside a body": func(t *testing.T, fs *vfs.MemFS, all []appended) int64 {
			host := all[len(all)-3]
			inner := rec(100, 7)
			entry := binary.BigEndian.AppendUint32(inner, Checksum(inner))
			pos := host.phys%testSeg + 60
			patchFile(t, fs, seg(all, len(all)-3), pos, func(b []byte) { copy(b, entry) })
			// Reseal the host so that only the hidden entry is in question.
			patchFile(t, fs, seg(all, len(all)-3), host.phys%testSeg, func(b []byte) {
				n := len(host.rec)
				binary.BigEndian.PutUint32(b[n:], Checksum(b[:n]))
			})
			return host.phys + 60
		},
		// A valid record whose PHYSICALOFFSET names another offset (a
		// stale or misdirected queue entry must not be trusted).
		"record naming another offset": func(t *testing.T, fs *vfs.MemFS, all []appended) int64 {
			r := all[len(all)-3]
			patchFile(t, fs, seg(all, len(all)-3), r.phys%testSeg, func(b []byte) {
				n := len(r.rec)
				binary.BigEndian.PutUint64(b[28:], uint64(r.phys+testSeg))
				binary.BigEndian.PutUint32(b[n:], Checksum(b[:n]))
			})
			return r.phys
		},
		"torn tail after it": func(t *testing.T, fs *vfs.MemFS, all []appended) int64 {
			last := all[len(all)-1]
			truncateFile(t, fs, seg(all, len(all)-1), last.phys%testSeg+50)
			return all[len(all)-3].phys
		},
		"corruption after it": func(t *testing.T, fs *vfs.MemFS, all []appended) int64 {
			patchFile(t, fs, seg(all, len(all)-2), all[len(all)-2].phys%testSeg+100, func(b []byte) { b[0] ^= 1 })
			return all[len(all)-3].phys
		},
	}
	for name, prepare := range cases {
		t.Run(name, func(t *testing.T) {
			// The same damage, recovered without and with the resume point.
			var want, got RecoverResult
			var wantErr, gotErr error
			for i, resume := range []bool{false, true} {
				fs, all := stampedLog(t, sizes()...)
				end := logEnd(all)
				r := prepare(t, fs, all)
				opts := RecoverOptions{From: end, DurableFrom: end, QuarantineDir: "/data/q"}
				if resume {
					opts.Resume = r
				}
				l, err := Open(Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: testSeg})
				if err != nil {
					t.Fatal(err)
				}
				res, err := l.Recover(opts)
				l.Close()
				if i == 0 {
					want, wantErr = res, err
				} else {
					got, gotErr = res, err
				}
			}
			if got.End != want.End || got.ScannedFrom != want.ScannedFrom || got.Records != want.Records ||
				got.TornBytes != want.TornBytes || errors.Is(gotErr, ErrCorrupt) != errors.Is(wantErr, ErrCorrupt) {
				t.Fatalf("with the resume point: %+v %v; without: %+v %v", got, gotErr, want, wantErr)
			}
		})
	}
}

// Recover does not look before the resume point: damage there is found when
// the record is read (and by Verify), never served.
func TestDamageBeforeResumePointIsFoundOnRead(t *testing.T) {
	fs, all := stampedLog(t, sizes()...)
	end := logEnd(all)
	victim := all[len(all)-4]
	patchFile(t, fs, "/data/commitlog/"+SegmentName(victim.phys-victim.phys%testSeg), victim.phys%testSeg+100, func(b []byte) { b[0] ^= 1 })
	l, res := openLog(t, fs, RecoverOptions{From: end, DurableFrom: end, Resume: all[len(all)-2].phys})
	defer l.Close()
	if res.End != end {
		t.Fatalf("end %d, want %d", res.End, end)
	}
	if _, err := l.ReadEntry(victim.phys, int32(len(victim.rec)), nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("read of the damaged record: %v", err)
	}
	if _, probs, err := l.Verify(nil); err != nil || len(probs) != 1 || probs[0].Offset != victim.phys {
		t.Fatalf("verify: %v %v", probs, err)
	}
}

// Zeros after the last record (the prefilled room ahead of the writer, or
// a zero-filled tail after a crash) keep the fast path: they are cut where
// the full scan cuts them. Zeros at the resume point itself do not.
func TestRecoverFromResumePointCutsAZeroTail(t *testing.T) {
	for _, atResume := range []bool{false, true} {
		var want RecoverResult
		for _, resume := range []bool{false, true} {
			fs, all := stampedLog(t, sizes()...)
			end := logEnd(all)
			r := all[len(all)-3].phys
			seg := "/data/commitlog/" + SegmentName(end-end%testSeg)
			zeroFrom := end
			if atResume {
				zeroFrom = r
			}
			f, err := fs.OpenFile(seg, 2, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(make([]byte, testSeg-zeroFrom%testSeg-100), zeroFrom%testSeg)
			f.Sync()
			f.Close()
			// What reads as zeros was never fdatasynced.
			if err := LowerMark(fs, "/data/commitlog", zeroFrom); err != nil {
				t.Fatal(err)
			}
			opts := RecoverOptions{From: end, DurableFrom: end, Crashed: true}
			if resume {
				opts.Resume = r
			}
			l, res := openLog(t, fs, opts)
			size, _ := fs.Stat(seg)
			l.Close()
			if size.Size() != zeroFrom%testSeg {
				t.Fatalf("zeros at resume %v, resume %v: segment file of %d bytes, want %d", atResume, resume, size.Size(), zeroFrom%testSeg)
			}
			if !resume {
				want = res
				continue
			}
			wantFrom := want.ScannedFrom
			if !atResume {
				wantFrom = r
			}
			if res.End != want.End || res.TornBytes != want.TornBytes || res.ScannedFrom != wantFrom {
				t.Fatalf("zeros at resume %v: with the resume point %+v, without %+v", atResume, res, want)
			}
		}
	}
}
