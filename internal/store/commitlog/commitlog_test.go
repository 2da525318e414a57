package commitlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

const testSeg = 4096

// rec builds an opaque V1 record of n bytes whose body bytes derive from seed.
func rec(n int, seed byte) []byte {
	b := make([]byte, n)
	binary.BigEndian.PutUint32(b[0:], uint32(n))
	binary.BigEndian.PutUint32(b[4:], u32(message.MagicV1))
	for i := 8; i < n; i++ {
		b[i] = seed + byte(i)
	}
	return b
}

// recs300 returns n records of 300 bytes (304 with the trailer), seeded
// 0..n-1.
func recs300(n int) [][]byte {
	recs := make([][]byte, n)
	for i := range recs {
		recs[i] = rec(300, byte(i))
	}
	return recs
}

func openLog(t testing.TB, fs vfs.FS, opts RecoverOptions) (*Log, RecoverResult) {
	t.Helper()
	return openConfigured(t, Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: testSeg}, opts)
}

// openConfigured opens a log of cfg and recovers it with opts; the caller
// closes it.
func openConfigured(t testing.TB, cfg Config, opts RecoverOptions) (*Log, RecoverResult) {
	t.Helper()
	l, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Recover(opts)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	return l, res
}

type appended struct {
	phys int64
	rec  []byte
}

func appendAll(t testing.TB, l *Log, recs ...[]byte) []appended {
	t.Helper()
	var out []appended
	_, err := l.Append(recs, func(i int, r []byte, phys int64) {
		binary.BigEndian.PutUint64(r[8:], uint64(phys)) // stamp like PatchStored would
		if len(r) >= physOffsetEnd {
			binary.BigEndian.PutUint64(r[physOffsetEnd-8:], uint64(phys)) // PHYSICALOFFSET, which repair trusts
		}
		out = append(out, appended{phys: phys, rec: append([]byte(nil), r...)})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func checkReadable(t testing.TB, l *Log, want []appended) {
	t.Helper()
	for _, a := range want {
		got, err := l.ReadEntry(a.phys, int32(len(a.rec)), nil)
		if err != nil {
			t.Fatalf("read %d: %v", a.phys, err)
		}
		if !bytes.Equal(got, a.rec) {
			t.Fatalf("record at %d differs", a.phys)
		}
		got, err = l.ReadRecord(a.phys, nil)
		if err != nil || !bytes.Equal(got, a.rec) {
			t.Fatalf("ReadRecord %d: %v", a.phys, err)
		}
	}
}

func TestAppendRollsOverWithBlankMarker(t *testing.T) {
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	defer l.Close()
	var all []appended
	for i := range 40 {
		all = append(all, appendAll(t, l, rec(200+i*7, byte(i)))...)
	}
	checkReadable(t, l, all)
	for _, a := range all {
		rel := a.phys % testSeg
		if rel+int64(len(a.rec))+TrailerBytes+BlankBytes > testSeg {
			t.Fatalf("record at %d leaves no room for the end marker", a.phys)
		}
	}
	segs := l.Segments()
	if len(segs) < 3 {
		t.Fatalf("want several segments, got %d", len(segs))
	}
	for i, s := range segs {
		if filepath.Base(s.Path) != fmt.Sprintf("%020d", int64(i)*testSeg) {
			t.Fatalf("segment %d named %s", i, s.Path)
		}
	}
	// Every closed segment ends with a blank marker reaching its end.
	for _, s := range segs[:len(segs)-1] {
		f, _ := fs.OpenFile(s.Path, 0, 0)
		size, _ := f.Size()
		var h [8]byte
		f.ReadAt(h[:], size-8)
		f.Close()
		if int32(be32(h[4:])) != message.MagicBlank || int64(be32(h[:4])) != testSeg-(size-8) {
			t.Fatalf("segment %s does not end with a valid blank marker", s.Path)
		}
	}
	// The sequential reader sees exactly the records, skipping markers.
	r := l.NewReader(0)
	for i := 0; ; i++ {
		got, phys, err := r.Next(l.WrittenOffset())
		if err == io.EOF {
			if i != len(all) {
				t.Fatalf("reader saw %d records, want %d", i, len(all))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if phys != all[i].phys || !bytes.Equal(got, all[i].rec) {
			t.Fatalf("reader record %d at %d, want %d", i, phys, all[i].phys)
		}
	}
}

func TestAppendBatchSpanningSegments(t *testing.T) {
	l, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer l.Close()
	recs := recs300(30)
	all := appendAll(t, l, recs...)
	if len(all) != 30 || all[29].phys < 2*testSeg {
		t.Fatalf("batch did not span segments: last at %d", all[29].phys)
	}
	checkReadable(t, l, all)
	// The input records are not modified.
	if binary.BigEndian.Uint64(recs[5][8:]) == uint64(all[5].phys) && all[5].phys != 0 {
		t.Fatal("Append modified its input")
	}
}

func TestAppendRejectsOversizedAndMalformed(t *testing.T) {
	l, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer l.Close()
	if _, err := l.Append([][]byte{rec(testSeg-BlankBytes-TrailerBytes+1, 0)}, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized: %v", err)
	}
	bad := rec(100, 0)
	binary.BigEndian.PutUint32(bad, 99)
	if _, err := l.Append([][]byte{bad}, nil); err == nil {
		t.Fatal("malformed header accepted")
	}
	if l.Err() != nil || l.WrittenOffset() != 0 {
		t.Fatal("a rejected record changed the log")
	}
	// The largest record that fits still works.
	appendAll(t, l, rec(testSeg-BlankBytes-TrailerBytes, 1))
}

func TestReopenContinues(t *testing.T) {
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	all := appendAll(t, l, rec(1000, 1), rec(1500, 2), rec(2000, 3))
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	end := l.WrittenOffset()
	l.Close()
	l, res := openLog(t, fs, RecoverOptions{From: end})
	defer l.Close()
	if res.End != end || l.WrittenOffset() != end || l.FlushedOffset() != end {
		t.Fatalf("recovered end %d, want %d", res.End, end)
	}
	all = append(all, appendAll(t, l, rec(700, 4))...)
	checkReadable(t, l, all)
}

func TestRecoverCutsTornTail(t *testing.T) {
	for _, cut := range []int{1, 5, 8, 100, 699, 703} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			fs := vfs.NewMem()
			l, _ := openLog(t, fs, RecoverOptions{})
			all := appendAll(t, l, rec(500, 1), rec(600, 2), rec(700, 3))
			l.Flush()
			l.Close()
			last := all[2]
			// The last record was never fdatasynced (a torn write):
			// neither is it under the flushed mark.
			if err := LowerMark(fs, "/data/commitlog", last.phys); err != nil {
				t.Fatal(err)
			}
			truncateFile(t, fs, "/data/commitlog/"+SegmentName(0), last.phys+int64(cut))
			l, res := openLog(t, fs, RecoverOptions{})
			defer l.Close()
			if res.End != last.phys || res.TornBytes != int64(cut) {
				t.Fatalf("end %d torn %d, want %d %d", res.End, res.TornBytes, last.phys, cut)
			}
			checkReadable(t, l, all[:2])
			more := appendAll(t, l, rec(300, 9))
			if more[0].phys != last.phys {
				t.Fatalf("append after cut at %d, want %d", more[0].phys, last.phys)
			}
		})
	}
}

func truncateFile(t testing.TB, fs vfs.FS, path string, size int64) {
	t.Helper()
	f, err := fs.OpenFile(path, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Sync()
}

func patchFile(t testing.TB, fs vfs.FS, path string, off int64, fn func([]byte)) {
	t.Helper()
	f, err := fs.OpenFile(path, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	f.ReadAt(b, 0)
	fn(b[off:])
	f.WriteAt(b, 0)
	f.Sync()
}

func TestRecoverCorruptionInTheMiddle(t *testing.T) {
	cases := map[string]func(b []byte){
		"header": func(b []byte) { b[2] ^= 0x10 },
		"magic":  func(b []byte) { b[5] ^= 0xff },
		"body":   func(b []byte) { b[200] ^= 1 },
		"crc":    func(b []byte) { b[499+2] ^= 1 },
		"zeroed": func(b []byte) { clear(b[:500]) },
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			fs := vfs.NewMem()
			l, _ := openLog(t, fs, RecoverOptions{})
			all := appendAll(t, l, rec(400, 1), rec(499, 2), rec(400, 3), rec(300, 4))
			l.Flush()
			l.Close()
			seg := "/data/commitlog/" + SegmentName(0)
			patchFile(t, fs, seg, all[1].phys, corrupt)

			_, err := Open(Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: testSeg})
			if err != nil {
				t.Fatal(err)
			}
			l2, _ := Open(Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: testSeg})
			_, err = l2.Recover(RecoverOptions{})
			l2.Close()
			var ce *CorruptionError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("want a CorruptionError, got %v", err)
			}
			if ce.Offset != all[1].phys || ce.NextValid != all[2].phys || ce.Segment != seg {
				t.Fatalf("corruption reported at %d (next %d) in %s", ce.Offset, ce.NextValid, ce.Segment)
			}
			// Nothing changed: a second attempt reports the same.
			l2, _ = Open(Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: testSeg})
			if _, err := l2.Recover(RecoverOptions{}); !errors.As(err, &ce) {
				t.Fatalf("second recovery: %v", err)
			}
			l2.Close()

			// Repair replaces the damaged entry alone by a hole record; its
			// bytes go to quarantine, every other record stays.
			orig := readFileBytes(t, fs, seg)[all[1].phys:all[2].phys]
			l3, res := openLog(t, fs, RecoverOptions{Repair: true, QuarantineDir: "/data/quarantine"})
			defer l3.Close()
			end := all[3].phys + int64(len(all[3].rec)) + TrailerBytes
			if len(res.Repaired) != 1 || res.End != end || res.Quarantined != int64(len(orig)) || res.Records != 3 {
				t.Fatalf("repair result %+v", res)
			}
			checkReadable(t, l3, []appended{all[0], all[2], all[3]})
			if _, err := l3.ReadEntry(all[1].phys, int32(len(all[1].rec)), nil); !IsHole(err) || !IsNoRecord(err) {
				t.Fatalf("repaired record at %d: %v", all[1].phys, err)
			}
			if _, err := l3.ReadRecord(all[1].phys, nil); !IsHole(err) {
				t.Fatalf("repaired record at %d, read without its size: %v", all[1].phys, err)
			}
			names, _ := fs.List("/data/quarantine")
			if len(names) != 1 || !bytes.Equal(readFileBytes(t, fs, "/data/quarantine/"+names[0]), orig) {
				t.Fatalf("quarantine holds %v, want the %d damaged bytes", names, len(orig))
			}
			more := appendAll(t, l3, rec(300, 5))
			if more[0].phys != end {
				t.Fatalf("append after repair at %d, want %d", more[0].phys, end)
			}
			// The repaired log verifies: the hole is reported as such, not
			// as a problem, and a reader skips it.
			if _, probs, err := l3.Verify(nil); err != nil || len(probs) != 0 {
				t.Fatalf("verify after repair: %v %v", probs, err)
			}
			if holes := l3.Holes(); len(holes) != 1 || holes[0].Offset != all[1].phys || holes[0].Bytes != int64(len(orig)) {
				t.Fatalf("holes after repair: %+v", holes)
			}
			r := l3.NewReader(0)
			var got []int64
			for {
				_, phys, err := r.Next(l3.WrittenOffset())
				if err != nil {
					break
				}
				got = append(got, phys)
			}
			if want := []int64{all[0].phys, all[2].phys, all[3].phys, more[0].phys}; !slices.Equal(got, want) {
				t.Fatalf("reader after repair read %v, want %v", got, want)
			}
		})
	}
}

func TestRecoverCorruptionInEarlierSegment(t *testing.T) {
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	var all []appended
	for i := range 20 {
		all = append(all, appendAll(t, l, rec(900, byte(i)))...)
	}
	l.Flush()
	l.Close()
	// The last record of segment 0 is zeroed: valid data follows in segment 1.
	var victim appended
	for _, a := range all {
		if a.phys < testSeg {
			victim = a
		}
	}
	patchFile(t, fs, "/data/commitlog/"+SegmentName(0), victim.phys, func(b []byte) { clear(b) })
	l2, _ := Open(Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: testSeg})
	defer l2.Close()
	_, err := l2.Recover(RecoverOptions{})
	var ce *CorruptionError
	if !errors.As(err, &ce) || ce.Offset != victim.phys || ce.NextValid != testSeg {
		t.Fatalf("got %v", err)
	}
	l2.Close()

	// Nothing valid follows in segment 0: repair closes it at the victim
	// with a blank marker; every record of segment 1 on stays.
	l3, res := openLog(t, fs, RecoverOptions{Repair: true, QuarantineDir: "/data/quarantine"})
	defer l3.Close()
	last := all[len(all)-1]
	if len(res.Repaired) != 1 || res.End != last.phys+int64(len(last.rec))+TrailerBytes {
		t.Fatalf("repair result %+v", res)
	}
	var kept []appended
	for _, a := range all {
		if a.phys != victim.phys {
			kept = append(kept, a)
		}
	}
	checkReadable(t, l3, kept)
	if _, err := l3.ReadEntry(victim.phys, int32(len(victim.rec)), nil); !IsNoRecord(err) {
		t.Fatalf("repaired record: %v", err)
	}
	if _, probs, err := l3.Verify(nil); err != nil || len(probs) != 0 {
		t.Fatalf("verify after repair: %v %v", probs, err)
	}
}

func TestRecoverRemovesGarbageSegmentsAfterTornTail(t *testing.T) {
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	all := appendAll(t, l, rec(900, 1), rec(900, 2))
	l.Flush()
	l.Close()
	// An unfinished segment 0 followed by an empty and a garbage segment.
	for _, base := range []int64{testSeg, 2 * testSeg} {
		f, _ := fs.OpenFile("/data/commitlog/"+SegmentName(base), 0x42, 0o644)
		if base == 2*testSeg {
			f.WriteAt(bytes.Repeat([]byte{0xCB}, 100), 0)
		}
		f.Sync()
		f.Close()
	}
	fs.SyncDir("/data/commitlog")
	l2, res := openLog(t, fs, RecoverOptions{})
	defer l2.Close()
	if res.End != all[1].phys+904 || len(res.RemovedSegments) != 2 || len(l2.Segments()) != 1 {
		t.Fatalf("result %+v, segments %v", res, l2.Segments())
	}
	checkReadable(t, l2, all)
}

func TestGroupCommitAndFailure(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.RunFlusher(stop, 0) }()
	defer func() { close(stop); wg.Wait() }()

	var mu sync.Mutex
	var writers sync.WaitGroup
	for i := range 8 {
		writers.Add(1)
		go func() {
			defer writers.Done()
			mu.Lock()
			end, err := l.Append([][]byte{rec(100, byte(i))}, nil)
			mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			if err := l.WaitFlushed(context.Background(), end, 5*time.Second); err != nil {
				t.Error(err)
			}
			if l.FlushedOffset() < end {
				t.Error("acknowledged before flushed")
			}
		}()
	}
	writers.Wait()

	efs.InjectSyncError("commitlog")
	end, err := l.Append([][]byte{rec(100, 9)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.WaitFlushed(context.Background(), end, 5*time.Second); !errors.Is(err, ErrFailed) {
		t.Fatalf("wait after failed fsync: %v", err)
	}
	if _, err := l.Append([][]byte{rec(100, 10)}, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after failure: %v", err)
	}
	if l.FlushedOffset() >= end {
		t.Fatal("flushed offset advanced over a failed fsync")
	}
	if _, err := l.ReadRecord(0, nil); err != nil {
		t.Fatalf("reads must keep working: %v", err)
	}
}

func TestWaitFlushedHonoursContextAndTimeout(t *testing.T) {
	l, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer l.Close()
	end, _ := l.Append([][]byte{rec(100, 1)}, nil)
	// No flusher runs, so nothing completes.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.WaitFlushed(ctx, end, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	if err := l.WaitFlushed(context.Background(), end, time.Millisecond); !errors.Is(err, ErrFlushTimeout) {
		t.Fatalf("timeout: %v", err)
	}
}

func TestWriteErrorFailsLog(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, _ := openLog(t, efs, RecoverOptions{})
	defer l.Close()
	appendAll(t, l, rec(100, 1))
	efs.InjectOnce(vfs.OpWrite, "commitlog")
	if _, err := l.Append([][]byte{rec(100, 2)}, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("append with failing write: %v", err)
	}
	if _, err := l.Append([][]byte{rec(100, 3)}, nil); !errors.Is(err, ErrFailed) {
		t.Fatalf("append after failure: %v", err)
	}
	if l.WrittenOffset() != 104 {
		t.Fatalf("written offset moved to %d", l.WrittenOffset())
	}
}

func TestPowerLossKeepsFlushedRecords(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rounds := 100
	for round := range rounds {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		fs := vfs.NewMem()
		l, _ := openLog(t, fs, RecoverOptions{})
		var durable []appended
		for range rng.IntN(60) + 1 {
			batch := make([][]byte, rng.IntN(3)+1)
			for i := range batch {
				batch[i] = rec(rng.IntN(1500)+16, byte(rng.Uint32()))
			}
			got := appendAll(t, l, batch...)
			if rng.IntN(3) == 0 {
				if err := l.Flush(); err != nil {
					t.Fatal(err)
				}
				durable = append(durable, got...)
			}
		}
		fs.CrashWith(rng)
		l2, res := openLog(t, fs, RecoverOptions{})
		if len(durable) > 0 && res.End < durable[len(durable)-1].phys {
			t.Fatalf("seed %d round %d: end %d lost flushed records", seed, round, res.End)
		}
		checkReadable(t, l2, durable)
		l2.Close()
	}
}

func readFileBytes(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<40))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A damaged record whose body holds a well-formed entry (a producer can
// send any bytes): repair must not resume at that entry, which does not
// name its own offset, but at the next real record.
func TestRepairDoesNotTrustAnEntryInsideTheDamage(t *testing.T) {
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	inner := rec(100, 9)
	inner = be32append(inner, Checksum(inner))
	outer := rec(600, 1)
	copy(outer[200:], inner)
	all := appendAll(t, l, rec(400, 0), outer, rec(300, 2))
	l.Flush()
	l.Close()
	seg := "/data/commitlog/" + SegmentName(0)
	patchFile(t, fs, seg, all[1].phys, func(b []byte) { b[5] ^= 0xff }) // the magic
	orig := readFileBytes(t, fs, seg)[all[1].phys:all[2].phys]

	l2, res := openLog(t, fs, RecoverOptions{Repair: true, QuarantineDir: "/data/quarantine"})
	defer l2.Close()
	if len(res.Repaired) != 1 || res.Repaired[0].NextValid != all[1].phys+200 || res.Quarantined != int64(len(orig)) {
		t.Fatalf("repair result %+v (the inner entry is at %d)", res, all[1].phys+200)
	}
	r := l2.NewReader(0)
	var got []int64
	for {
		_, phys, err := r.Next(l2.WrittenOffset())
		if err != nil {
			break
		}
		got = append(got, phys)
	}
	if want := []int64{all[0].phys, all[2].phys}; !slices.Equal(got, want) {
		t.Fatalf("records after the repair at %v, want %v", got, want)
	}
}

// The copy into quarantine comes first: if it fails, a repair changes
// nothing in the segment.
func TestRepairChangesNothingWhenQuarantineFails(t *testing.T) {
	fs := vfs.NewMem()
	l, _ := openLog(t, fs, RecoverOptions{})
	all := appendAll(t, l, rec(400, 0), rec(500, 1), rec(300, 2))
	l.Flush()
	l.Close()
	seg := "/data/commitlog/" + SegmentName(0)
	patchFile(t, fs, seg, all[1].phys+100, func(b []byte) { b[0] ^= 1 })
	before := readFileBytes(t, fs, seg)
	efs := vfs.NewErrorFS(fs)
	efs.InjectSyncError("/data/quarantine/")
	l2, err := Open(Config{FS: efs, Dir: "/data/commitlog", SegmentBytes: testSeg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Recover(RecoverOptions{Repair: true, QuarantineDir: "/data/quarantine"}); err == nil {
		t.Fatal("repaired although the quarantine copy failed")
	}
	l2.Close()
	if !bytes.Equal(readFileBytes(t, fs, seg), before) {
		t.Fatal("a failed repair changed the segment")
	}
}

// A power loss in the middle of a repair (the hole record written but not
// yet synced) loses nothing: the next repair finds the same damage, and
// its quarantine copy goes to a new file beside the first, both holding
// the original bytes.
func TestRepairInterruptedByPowerLoss(t *testing.T) {
	mem := vfs.NewMem()
	l, _ := openLog(t, mem, RecoverOptions{})
	all := appendAll(t, l, rec(400, 0), rec(500, 1), rec(300, 2))
	l.Flush()
	l.Close()
	seg := "/data/commitlog/" + SegmentName(0)
	patchFile(t, mem, seg, all[1].phys+100, func(b []byte) { b[0] ^= 1 })
	orig := readFileBytes(t, mem, seg)[all[1].phys:all[2].phys]

	efs := vfs.NewErrorFS(mem)
	efs.InjectSyncError(seg)
	l2, err := Open(Config{FS: efs, Dir: "/data/commitlog", SegmentBytes: testSeg})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Recover(RecoverOptions{Repair: true, QuarantineDir: "/data/quarantine"}); err == nil {
		t.Fatal("repair reported success although the segment's fdatasync failed")
	}
	l2.Close()
	crashed := mem.CrashClone()

	l3, res := openLog(t, crashed, RecoverOptions{Repair: true, QuarantineDir: "/data/quarantine"})
	defer l3.Close()
	if len(res.Repaired) != 1 {
		t.Fatalf("second repair: %+v", res)
	}
	checkReadable(t, l3, []appended{all[0], all[2]})
	names, _ := crashed.List("/data/quarantine")
	if len(names) != 2 {
		t.Fatalf("quarantine after two repairs of the same range: %v", names)
	}
	for _, name := range names {
		if !bytes.Equal(readFileBytes(t, crashed, "/data/quarantine/"+name), orig) {
			t.Fatalf("%s does not hold the original damaged bytes", name)
		}
	}
}

// With everything flushed the periodic flusher parks (no tick every
// interval while idle); a write wakes it and is flushed at the next
// periodic moment without anybody asking, and it parks again.
func TestFlusherParksWhileFlushedAndWakesOnWrite(t *testing.T) {
	l, _ := openLog(t, vfs.NewMem(), RecoverOptions{})
	defer l.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.RunFlusher(stop, 20*time.Millisecond) }()
	defer func() { close(stop); wg.Wait() }()
	wait := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait("the idle flusher to park", l.flusherParked.Load)
	for i := range 3 {
		end, err := l.Append([][]byte{rec(100, byte(i))}, nil)
		if err != nil {
			t.Fatal(err)
		}
		wait("the periodic flush of the write", func() bool { return l.FlushedOffset() >= end })
		wait("the flusher to park again", l.flusherParked.Load)
	}
}

// With NotifyFlushedOnly a write does not call Notify (a SYNC_FLUSH store's
// dispatcher has nothing to do until a flush); a flush does. Without it,
// both do.
func TestNotifyFlushedOnlySkipsWrites(t *testing.T) {
	for _, only := range []bool{false, true} {
		var n atomic.Int32
		l, _ := openConfigured(t, Config{FS: vfs.NewMem(), Dir: "/data/commitlog", SegmentBytes: testSeg,
			Notify: func() { n.Add(1) }, NotifyFlushedOnly: only}, RecoverOptions{})
		n.Store(0)
		appendAll(t, l, rec(100, 1))
		appendAll(t, l, rec(100, 2))
		afterWrites := n.Load()
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
		afterFlush := n.Load() - afterWrites
		l.Close()
		wantWrites := int32(2)
		if only {
			wantWrites = 0
		}
		if afterWrites != wantWrites || afterFlush != 1 {
			t.Errorf("NotifyFlushedOnly=%v: %d notifies after two writes, %d after the flush; want %d and 1",
				only, afterWrites, afterFlush, wantWrites)
		}
	}
}
