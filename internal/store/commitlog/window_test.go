package commitlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// readCountFS counts the reads of the segment files it opens.
type readCountFS struct {
	vfs.FS
	reads atomic.Int64
}

type readCountFile struct {
	vfs.File
	fs *readCountFS
}

func (fs *readCountFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if _, ok := ParseSegmentName(filepath.Base(name)); !ok {
		return f, nil
	}
	return readCountFile{f, fs}, nil
}

func (f readCountFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.reads.Add(1)
	return f.File.ReadAt(p, off)
}

const windowTestSeg = 64 << 10

// openReadWindowLog opens and recovers a log with segments of seg bytes
// and a read window of window bytes; the caller closes it.
func openReadWindowLog(t testing.TB, fs vfs.FS, seg, window int64) *Log {
	t.Helper()
	l, _ := openConfigured(t, Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: seg, ReadWindowBytes: window}, RecoverOptions{})
	return l
}

// fileRead reads like readUpTo from the segment file only.
func fileRead(l *Log, p []byte, off int64, need int) (int, error) { return l.read(p, off, need, false) }

// checkFromMemory reads every record of want, and checks that each is
// what was appended and that no read reached a segment file.
func checkFromMemory(t *testing.T, l *Log, fs *readCountFS, want []appended) {
	t.Helper()
	before := fs.reads.Load()
	checkReadable(t, l, want)
	if n := fs.reads.Load() - before; n != 0 {
		t.Fatalf("%d reads of segment files for %d records the window holds", n, len(want))
	}
}

func TestReadWindowServesRecentRecordsFromMemory(t *testing.T) {
	fs := &readCountFS{FS: vfs.NewMem()}
	l := openReadWindowLog(t, fs, windowTestSeg, 8192)
	defer l.Close()
	all := appendAll(t, l, recs300(10)...)
	all = append(all, appendAll(t, l, rec(500, 7))...)
	checkFromMemory(t, l, fs, all)
	// The counter sees reads: without a window every record is read from
	// its file.
	fs2 := &readCountFS{FS: vfs.NewMem()}
	l2 := openReadWindowLog(t, fs2, windowTestSeg, 0)
	defer l2.Close()
	all2 := appendAll(t, l2, recs300(10)...)
	before := fs2.reads.Load()
	checkReadable(t, l2, all2)
	if n := fs2.reads.Load() - before; n < int64(len(all2)) {
		t.Fatalf("without a window %d file reads for %d records", n, len(all2))
	}
}

func TestReadWindowBounds(t *testing.T) {
	const window = 4096
	fs := &readCountFS{FS: vfs.NewMem()}
	l := openReadWindowLog(t, fs, windowTestSeg, window)
	defer l.Close()
	var all []appended
	for i := range 40 {
		all = append(all, appendAll(t, l, rec(300, byte(i)))...)
	}
	lo, hi := l.win.held()
	if hi != l.WrittenOffset() || hi-lo != window || l.win.allocated() != window {
		t.Fatalf("window holds [%d, %d) in %d bytes, written %d, size %d", lo, hi, l.win.allocated(), l.WrittenOffset(), window)
	}
	var inside, outside []appended
	for _, a := range all {
		if a.phys >= lo {
			inside = append(inside, a)
		} else {
			outside = append(outside, a)
		}
	}
	checkFromMemory(t, l, fs, inside)
	// Older records, and one straddling the window's start, come from the
	// file, whole and right.
	before := fs.reads.Load()
	checkReadable(t, l, outside)
	if fs.reads.Load() == before {
		t.Fatal("records below the window were not read from the file")
	}
	straddle := outside[len(outside)-1]
	if straddle.phys+int64(len(straddle.rec))+TrailerBytes <= lo {
		t.Fatalf("test set-up: no record straddles the window start %d", lo)
	}
	// Nothing past the written offset, even with bytes to give.
	p := make([]byte, 16)
	if err := l.ReadAt(p, l.WrittenOffset()-8); !errors.Is(err, ErrBeyondEnd) {
		t.Fatalf("read past the written offset: %v", err)
	}
	// A short read serves what lies below the written offset.
	w := l.WrittenOffset()
	big := make([]byte, 1024)
	n, err := l.readUpTo(big, w-100, 8)
	if err != nil || n != 100 || !bytes.Equal(big[:n], all[len(all)-1].withTrailer()[len(all[len(all)-1].rec)+TrailerBytes-100:]) {
		t.Fatalf("read up to the written offset: %d, %v", n, err)
	}

	// One batch larger than the window: its last window bytes are held.
	batch := appendAll(t, l, recs300(20)...)
	lo, hi = l.win.held()
	if hi != l.WrittenOffset() || hi-lo != window || l.win.allocated() != window {
		t.Fatalf("after a large batch the window holds [%d, %d) in %d bytes", lo, hi, l.win.allocated())
	}
	checkReadable(t, l, batch)
}

// withTrailer returns the record followed by its CRC, as in the log.
func (a appended) withTrailer() []byte {
	return binary.BigEndian.AppendUint32(append([]byte(nil), a.rec...), Checksum(a.rec))
}

// Truncation at every kind of place: inside the window, at and below its
// start, at a segment start. Nothing at or past the cut is held, what is
// below it is still right, and records appended at the cut are read back,
// not the old ones.
func TestReadWindowTruncate(t *testing.T) {
	const window = 2048
	cases := []struct {
		name string
		cut  func(all []appended, lo, hi int64) int64
	}{
		{"last record", func(all []appended, _, _ int64) int64 { return all[len(all)-1].phys }},
		{"inside", func(all []appended, lo, _ int64) int64 { return firstAtOrAfter(all, lo+500) }},
		{"first record in the window", func(all []appended, lo, _ int64) int64 { return firstAtOrAfter(all, lo) }},
		{"below the window", func(all []appended, lo, _ int64) int64 { return firstAtOrAfter(all, lo-1500) }},
		{"segment start", func(all []appended, _, _ int64) int64 { return testSeg }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := &readCountFS{FS: vfs.NewMem()}
			l := openReadWindowLog(t, fs, testSeg, window)
			defer l.Close()
			var all []appended
			for i := range 20 { // 20 x 304 bytes: two segments
				all = append(all, appendAll(t, l, rec(300, byte(i)))...)
			}
			lo, hi := l.win.held()
			cut := c.cut(all, lo, hi)
			if err := l.CheckBoundary(0, cut, nil); err != nil {
				t.Fatal(err)
			}
			if err := l.Truncate(cut); err != nil {
				t.Fatal(err)
			}
			if lo, hi := l.win.held(); hi > cut || lo > hi {
				t.Fatalf("after a cut at %d the window holds [%d, %d)", cut, lo, hi)
			}
			var kept []appended
			for _, a := range all {
				if a.phys < cut {
					kept = append(kept, a)
				}
			}
			checkReadable(t, l, kept)
			p := make([]byte, headerBytes)
			if err := l.ReadAt(p, cut); !errors.Is(err, ErrBeyondEnd) {
				t.Fatalf("read at the cut: %v", err)
			}
			// Other records at the cut, shorter than the ones removed.
			var again []appended
			for i := range 3 {
				again = append(again, appendAll(t, l, rec(100+i, byte(100+i)))...)
			}
			if again[0].phys != cut {
				t.Fatalf("appended at %d after a cut at %d", again[0].phys, cut)
			}
			checkFromMemory(t, l, fs, again)
			checkReadable(t, l, kept)
			checkSameAsFile(t, l, 0, l.WrittenOffset())
		})
	}
}

func firstAtOrAfter(all []appended, off int64) int64 {
	for _, a := range all {
		if a.phys >= off {
			return a.phys
		}
	}
	panic("no record")
}

// checkSameAsFile reads [from, to) through readUpTo in pieces of every
// size up to a few records and compares each with a read of the file.
func checkSameAsFile(t *testing.T, l *Log, from, to int64) {
	t.Helper()
	for off := from; off < to; off += 37 {
		for _, n := range []int{1, 8, 300, 700} {
			n = int(min(int64(n), to-off, l.SegmentStart(off)+l.SegmentBytes()-off))
			got := make([]byte, n)
			want := make([]byte, n)
			gn, gerr := l.readUpTo(got, off, n)
			wn, werr := fileRead(l, want, off, n)
			if (gerr == nil) != (werr == nil) || gn != wn || !bytes.Equal(got[:gn], want[:wn]) {
				t.Fatalf("read [%d, %d): %d bytes, %v; the file: %d bytes, %v", off, off+int64(n), gn, gerr, wn, werr)
			}
			// At least one byte, up to n.
			gn, gerr = l.readUpTo(got, off, 1)
			wn, werr = fileRead(l, want, off, 1)
			if (gerr == nil) != (werr == nil) || gn != wn || !bytes.Equal(got[:gn], want[:wn]) {
				t.Fatalf("read of 1 to %d bytes at %d: %d bytes, %v; the file: %d bytes, %v", n, off, gn, gerr, wn, werr)
			}
		}
	}
}

func TestReadWindowStartAtAndRecover(t *testing.T) {
	fs := vfs.NewMem()
	l := openReadWindowLog(t, fs, testSeg, 2048)
	if err := l.StartAt(3 * testSeg); err != nil {
		t.Fatal(err)
	}
	if lo, hi := l.win.held(); lo != 3*testSeg || hi != 3*testSeg {
		t.Fatalf("after StartAt the window holds [%d, %d)", lo, hi)
	}
	all := appendAll(t, l, recs300(3)...)
	if lo, hi := l.win.held(); lo != 3*testSeg || hi != l.WrittenOffset() {
		t.Fatalf("the window holds [%d, %d), written %d", lo, hi, l.WrittenOffset())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// After a restart it starts empty, and the records come from the file.
	cfs := &readCountFS{FS: fs}
	l = openReadWindowLog(t, cfs, testSeg, 2048)
	defer l.Close()
	if lo, hi := l.win.held(); lo != hi || hi != l.WrittenOffset() || l.win.allocated() != 0 {
		t.Fatalf("after Recover the window holds [%d, %d) (%d bytes)", lo, hi, l.win.allocated())
	}
	before := cfs.reads.Load()
	checkReadable(t, l, all)
	if cfs.reads.Load() == before {
		t.Fatal("records written before the restart were not read from the file")
	}
}

// A failed log holds nothing in the window: reads go to the file, which
// alone says what is there after a failed fsync.
func TestReadWindowStopsWhenTheLogFails(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	fs := &readCountFS{FS: efs}
	l := openReadWindowLog(t, fs, testSeg, 2048)
	defer l.Close()
	all := appendAll(t, l, recs300(3)...)
	checkFromMemory(t, l, fs, all)
	efs.InjectSyncError("commitlog")
	if err := l.Flush(); !errors.Is(err, ErrFailed) {
		t.Fatalf("flush with a failing fdatasync: %v", err)
	}
	if lo, hi := l.win.held(); lo != hi {
		t.Fatalf("a failed log's window holds [%d, %d)", lo, hi)
	}
	before := fs.reads.Load()
	checkReadable(t, l, all)
	if fs.reads.Load() == before {
		t.Fatal("a failed log served reads from memory")
	}
}

// The re-reads after a failed verification read the file, never the
// window: a record damaged on disk is found damaged even while the window
// holds its intact bytes.
func TestRereadBypassesTheReadWindow(t *testing.T) {
	fs := vfs.NewMem()
	l := openReadWindowLog(t, fs, testSeg, 2048)
	defer l.Close()
	all := appendAll(t, l, recs300(3)...)
	victim := all[1]
	patchFile(t, fs, "/data/commitlog/"+SegmentName(0), victim.phys+50, func(b []byte) { b[0] ^= 0x40 })

	if got, err := l.ReadEntry(victim.phys, int32(len(victim.rec)), nil); err != nil || !bytes.Equal(got, victim.rec) {
		t.Fatalf("read through the window: %v", err)
	}
	if _, err := l.RereadEntry(victim.phys, int32(len(victim.rec))); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("RereadEntry of a record damaged on disk: %v", err)
	}
	if _, err := l.RereadRecord(victim.phys); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("RereadRecord of a record damaged on disk: %v", err)
	}
	r := l.NewReader(victim.phys)
	if got, _, err := r.Next(l.WrittenOffset()); err != nil || !bytes.Equal(got, victim.rec) {
		t.Fatalf("Reader through the window: %v", err)
	}
	r = l.NewReader(victim.phys)
	r.Reread()
	if _, _, err := r.Next(l.WrittenOffset()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Reader after Reread, record damaged on disk: %v", err)
	}
}

// Across a segment's end: the window goes on in the next segment, keeps
// the end of the closed one, and serves nothing of its blank tail (no file
// holds it); closing the next segment drops the older one.
func TestReadWindowAcrossASegmentEnd(t *testing.T) {
	const window = 2048
	fs := &readCountFS{FS: vfs.NewMem()}
	l := openReadWindowLog(t, fs, testSeg, window)
	defer l.Close()
	all := appendAll(t, l, recs300(13)...) // 13 x 304 bytes: the 14th does not fit
	all = append(all, appendAll(t, l, rec(300, 13), rec(300, 14))...)
	if all[13].phys != testSeg {
		t.Fatalf("test set-up: the 14th record at %d", all[13].phys)
	}
	lo, hi := l.win.held()
	if hi != l.WrittenOffset() || hi-lo != window || lo >= testSeg {
		t.Fatalf("the window holds [%d, %d), written %d", lo, hi, l.WrittenOffset())
	}
	var inside []appended
	for _, a := range all {
		if a.phys >= lo {
			inside = append(inside, a)
		}
	}
	if inside[0].phys >= testSeg {
		t.Fatal("test set-up: no record of the closed segment in the window")
	}
	checkFromMemory(t, l, fs, inside)
	blankEnd := all[12].phys + 304 + BlankBytes
	p := make([]byte, 16)
	if _, err := l.readUpTo(p, blankEnd, 8); !errors.Is(err, ErrNoRecord) {
		t.Fatalf("read in the blank tail: %v", err)
	}
	if n, err := l.readUpTo(p, blankEnd-12, 4); err != nil || n != 12 {
		t.Fatalf("read up to the end of the closed segment's file: %d, %v", n, err)
	}
	checkSameAsFile(t, l, max(lo-400, 0), l.WrittenOffset())
	// The next roll-over drops what lies before the older gap's end.
	for i := range 14 {
		all = append(all, appendAll(t, l, rec(300, byte(20+i)))...)
	}
	if lo, _ := l.win.held(); lo < testSeg {
		t.Fatalf("after the second roll-over the window starts at %d", lo)
	}
	checkSameAsFile(t, l, 0, l.WrittenOffset())
	checkReadable(t, l, all)
}

// A record of the replica's copy (AppendRaw) is held like an appended one.
func TestReadWindowHoldsRawAppends(t *testing.T) {
	src := openReadWindowLog(t, vfs.NewMem(), testSeg, 0)
	defer src.Close()
	all := appendAll(t, src, recs300(5)...)
	raw, next, err := src.ReadRaw(0, src.WrittenOffset(), 1<<20, nil)
	if err != nil || next != src.WrittenOffset() {
		t.Fatalf("read raw: %v (next %d)", err, next)
	}
	fs := &readCountFS{FS: vfs.NewMem()}
	l := openReadWindowLog(t, fs, testSeg, 4096)
	defer l.Close()
	if _, err := l.AppendRaw(0, raw); err != nil {
		t.Fatal(err)
	}
	checkFromMemory(t, l, fs, all)
}

// Appends and reads at once (go test -race): every read of a record below
// the written offset returns the record appended there, whether the window
// or the file serves it, while the window wraps many times over.
func TestReadWindowConcurrentAppendsAndReads(t *testing.T) {
	l := openReadWindowLog(t, vfs.NewMem(), windowTestSeg, 4096)
	defer l.Close()
	type placed struct {
		phys int64
		rec  []byte
	}
	var mu sync.Mutex
	var done []placed
	stop := make(chan struct{})
	var readers sync.WaitGroup
	var reads atomic.Int64
	for g := range 3 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			var buf []byte
			for {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				n := len(done)
				var p placed
				if n > 0 {
					p = done[n-1-rng.IntN(min(n, 30))] // mostly recent: the window
				}
				mu.Unlock()
				if n == 0 {
					continue
				}
				got, err := l.ReadEntry(p.phys, int32(len(p.rec)), buf)
				if err != nil || !bytes.Equal(got, p.rec) {
					t.Errorf("read of the record at %d: %v", p.phys, err)
					return
				}
				buf = got[:cap(got)]
				reads.Add(1)
			}
		}()
	}
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 3000 {
		k := 1 + rng.IntN(4)
		recs := make([][]byte, k)
		for j := range recs {
			recs[j] = rec(40+rng.IntN(900), byte(i+j))
		}
		as := appendAll(t, l, recs...)
		mu.Lock()
		for _, a := range as {
			done = append(done, placed(a))
		}
		mu.Unlock()
	}
	waitFor(t, "reads", func() bool { return reads.Load() >= 1000 })
	close(stop)
	readers.Wait()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(time.Millisecond):
		}
	}
}

// Property: whatever the appends and truncations, a read through the
// window returns exactly what a read of the file returns, never a byte past
// the written offset.
func FuzzReadWindow(f *testing.F) {
	f.Add([]byte{0, 10, 0, 200, 2, 5, 1, 3, 2, 9, 0, 255, 0, 40, 2, 1})
	f.Add([]byte{0, 255, 0, 255, 0, 255, 1, 0, 0, 17, 2, 200, 2, 3})
	f.Add([]byte{0, 80, 0, 80, 0, 80, 0, 80, 0, 80, 0, 80, 1, 2, 0, 1, 2, 0})
	f.Fuzz(func(t *testing.T, ops []byte) { readWindowOps(t, ops) })
}

func TestReadWindowMatchesTheFile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 60 {
		ops := make([]byte, 80)
		for i := range ops {
			ops[i] = byte(rng.UintN(256))
		}
		readWindowOps(t, ops)
	}
}

// readWindowOps runs ops (pairs: an operation, an argument) against a log
// with a 1 KiB window and 4 KiB segments: append a batch, truncate at a
// record, read ranges.
func readWindowOps(t *testing.T, ops []byte) {
	l := openReadWindowLog(t, vfs.NewMem(), testSeg, 1024)
	defer l.Close()
	var all []appended
	for i := 0; i+1 < len(ops); i += 2 {
		arg := int(ops[i+1])
		switch ops[i] % 3 {
		case 0: // a batch of 1-3 records of 16..1000 bytes
			var recs [][]byte
			for j := range 1 + arg%3 {
				recs = append(recs, rec(16+(arg*7+j*131)%985, byte(i+j)))
			}
			all = append(all, appendAll(t, l, recs...)...)
		case 1: // truncate at one of the records
			if len(all) == 0 {
				continue
			}
			k := len(all) - 1 - arg%len(all)
			if err := l.Truncate(all[k].phys); err != nil {
				t.Fatal(err)
			}
			all = all[:k]
		case 2: // reads
			w := l.WrittenOffset()
			if w == 0 {
				continue
			}
			off := max(w-int64(arg)*11, 0)
			checkSameAsFile(t, l, off, min(w, l.SegmentStart(off)+l.SegmentBytes()))
			p := make([]byte, 1+arg)
			n, err := l.readUpTo(p, off, 1)
			if err == nil && off+int64(n) > w {
				t.Fatalf("read [%d, %d) past the written offset %d", off, off+int64(n), w)
			}
		}
	}
	checkReadable(t, l, all)
	checkSameAsFile(t, l, max(l.WrittenOffset()-3000, 0), l.WrittenOffset())
}

// A repair rewrites bytes below the written offset: the window must not
// serve the record the hole replaced. (The store repairs before it writes,
// when the window holds nothing; the log keeps its promise regardless.)
func TestReadWindowDroppedByARepair(t *testing.T) {
	fs := vfs.NewMem()
	l := openReadWindowLog(t, fs, testSeg, 4096)
	defer l.Close()
	all := appendAll(t, l, recs300(6)...)
	patchFile(t, fs, "/data/commitlog/"+SegmentName(0), all[2].phys+100, func(b []byte) { b[0] ^= 1 })
	rs, err := l.RepairSegment(all[2].phys, l.WrittenOffset(), "/data/quarantine")
	if err != nil || len(rs) != 1 || rs[0].Offset != all[2].phys {
		t.Fatalf("repairs %v %v, want the record at %d", rs, err, all[2].phys)
	}
	if _, err := l.ReadRecord(all[2].phys, nil); !IsHole(err) {
		t.Fatalf("the repaired record read back: %v, want a hole", err)
	}
	checkReadable(t, l, append(all[:2:2], all[3:]...))
	checkSameAsFile(t, l, 0, l.WrittenOffset())
}

// The window serves nothing at or past the limit its reader passes (the
// written offset it checked), even while it holds more: the writer copies
// a write in before it publishes the written offset.
func TestReadWindowNeverPastTheLimit(t *testing.T) {
	w := newReadWindow(64)
	w.put(1000, bytes.Repeat([]byte{7}, 40))
	p := make([]byte, 50)
	if n, ok := w.read(p[:40], 1000, 1, 1030); !ok || n != 30 {
		t.Fatalf("read below a limit of 1030: %d bytes, %v", n, ok)
	}
	if _, ok := w.read(p, 1020, 20, 1030); ok {
		t.Fatal("served bytes past the limit")
	}
	if _, ok := w.read(p, 999, 1, 1040); ok {
		t.Fatal("served a byte before the window")
	}
	// Wrapped around the ring: the bytes come back in order.
	b := make([]byte, 50)
	for i := range b {
		b[i] = byte(i)
	}
	w.put(1040, b)
	if lo, hi := w.held(); lo != 1090-64 || hi != 1090 {
		t.Fatalf("holds [%d, %d)", lo, hi)
	}
	if n, ok := w.read(p[:50], 1040, 50, 1090); !ok || n != 50 || !bytes.Equal(p[:50], b) {
		t.Fatalf("wrapped read: %d, %v, %v", n, ok, p[:50])
	}
}

// A cut below a closed segment's gap leaves the gap empty; the writes
// that continue at the cut are served whole, not up to where the gap was.
func TestReadWindowCutBelowTheGap(t *testing.T) {
	w := newReadWindow(1024)
	b := make([]byte, 600)
	for i := range b {
		b[i] = byte(i)
	}
	w.put(3500, b[:500]) // the segment ends at 4096; its blank tail from 4000
	w.skip(4096)
	w.put(4096, b[:100])
	w.cut(3900) // back into the closed segment, below the gap
	w.put(3900, b[:300])
	p := make([]byte, 300)
	if n, ok := w.read(p, 3890, 1, 4200); !ok || n != 300 || !bytes.Equal(p[10:], b[:290]) {
		t.Fatalf("read at 3890 after a cut at 3900 and 300 bytes written there: %d bytes, %v", n, ok)
	}
	if n, ok := w.read(p[:20], 3990, 20, 4200); !ok || n != 20 || !bytes.Equal(p[:20], b[90:110]) {
		t.Fatalf("read across where the gap was: %d bytes, %v", n, ok)
	}
}

// A window of several chunks takes memory only as the writer reaches
// them, never more than its size, and serves records that cross from one
// chunk to the next and wrap around the ring.
func TestReadWindowChunks(t *testing.T) {
	fs := &readCountFS{FS: vfs.NewMem()}
	l := openReadWindowLog(t, fs, 16<<20, 3<<20+12345) // 3 chunks of 1 MiB
	defer l.Close()
	if l.win.size != 3<<20 || l.win.allocated() != 0 {
		t.Fatalf("window of %d bytes, %d allocated before any write", l.win.size, l.win.allocated())
	}
	var all []appended
	rng := rand.New(rand.NewPCG(3, 4))
	for l.WrittenOffset() < 10<<20 {
		var recs [][]byte
		for range 1 + rng.IntN(8) {
			recs = append(recs, rec(1000+rng.IntN(60000), byte(len(all))))
		}
		all = append(all, appendAll(t, l, recs...)...)
		if w, a := l.WrittenOffset(), l.win.allocated(); a > min(w+1<<20, 3<<20) || a < min(w, 3<<20) {
			t.Fatalf("%d bytes allocated after %d written", a, w)
		}
		lo, _ := l.win.held()
		var inside []appended
		for _, a := range all[max(len(all)-20, 0):] {
			if a.phys >= lo {
				inside = append(inside, a)
			}
		}
		checkFromMemory(t, l, fs, inside)
	}
	checkReadable(t, l, all)
}
