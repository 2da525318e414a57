package consumequeue

import (
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

const testDir = "/data/consumequeue/TopicA/3"

// entryFor is the entry the tests store at queue offset i.
func entryFor(i int64) Entry {
	return Entry{PhysOffset: 1000 + i*100, Size: 90, TagsCode: i * 7}
}

func openQueue(t testing.TB, fs vfs.FS, per, cache int) *Queue {
	t.Helper()
	q, err := Open(Config{FS: fs, Dir: testDir, Topic: "TopicA", QueueID: 3, EntriesPerSegment: per, TailCacheEntries: cache})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return q
}

func appendRange(t testing.TB, q *Queue, from, to int64) {
	t.Helper()
	for i := from; i < to; i++ {
		if err := q.Append(i, entryFor(i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

// checkRange reads [from, to) with Get in chunks of chunk and compares.
func checkRange(t testing.TB, q *Queue, from, to int64, chunk int) {
	t.Helper()
	dst := make([]Entry, chunk)
	for off := from; off < to; {
		n, err := q.Get(off, dst)
		if err != nil {
			t.Fatalf("get %d: %v", off, err)
		}
		if n == 0 {
			t.Fatalf("get %d: no entries, want up to %d", off, to)
		}
		for i, e := range dst[:n] {
			if want := entryFor(off + int64(i)); e != want {
				t.Fatalf("entry %d = %+v, want %+v", off+int64(i), e, want)
			}
		}
		off += int64(n)
	}
}

func checkBounds(t testing.TB, q *Queue, minOff, maxOff int64) {
	t.Helper()
	if q.MinOffset() != minOff || q.MaxOffset() != maxOff {
		t.Fatalf("bounds [%d, %d), want [%d, %d)", q.MinOffset(), q.MaxOffset(), minOff, maxOff)
	}
}

func listDir(t testing.TB, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.List(testDir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestAppendGetAcrossSegments(t *testing.T) {
	for _, cache := range []int{-1, 3, 0} {
		fs := vfs.NewMem()
		q := openQueue(t, fs, 10, cache)
		appendRange(t, q, 0, 35)
		checkBounds(t, q, 0, 35)
		for _, chunk := range []int{1, 7, 32, 100} {
			checkRange(t, q, 0, 35, chunk)
		}
		if n, err := q.Get(35, make([]Entry, 4)); n != 0 || err != nil {
			t.Fatalf("get at max: %d %v", n, err)
		}
		if got := q.LastPhysEnd(); got != entryFor(34).PhysOffset+90 {
			t.Fatalf("LastPhysEnd %d", got)
		}
		want := []string{"00000000000000000000", "00000000000000000200", "00000000000000000400", "00000000000000000600"}
		if got := listDir(t, fs); !slices.Equal(got, want) {
			t.Fatalf("files %v", got)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Get(0, make([]Entry, 1)); !errors.Is(err, ErrClosed) {
			t.Fatalf("get after close: %v", err)
		}
		if err := q.Close(); err != nil {
			t.Fatalf("second close: %v", err)
		}
	}
}

func TestRestartAfterFlush(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 10, 0)
	appendRange(t, q, 0, 25)
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	q = openQueue(t, fs, 10, 0)
	checkBounds(t, q, 0, 25)
	checkRange(t, q, 0, 25, 8)
	appendRange(t, q, 25, 31)
	checkRange(t, q, 0, 31, 8)
	if e, ok := q.LastEntry(); !ok || e != entryFor(30) {
		t.Fatalf("last %+v %v", e, ok)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQueue(t, fs, 10, 0)
	checkBounds(t, q, 0, 31)
}

func TestCrashLosesOnlyUnflushedEntries(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 10, 0)
	appendRange(t, q, 0, 15)
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	appendRange(t, q, 15, 27) // fills segment 1, creates segment 2: all unflushed
	fs.Crash()
	q = openQueue(t, fs, 10, 0)
	checkBounds(t, q, 0, 15)
	checkRange(t, q, 0, 15, 4)
	appendRange(t, q, 15, 27)
	checkRange(t, q, 0, 27, 4)
}

// TestTornCrash crashes with torn writes at random points and checks that
// the recovered queue is a prefix of what was appended, at least as long as
// what was flushed.
func TestTornCrash(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 3))
	for round := range rounds(60) {
		fs := vfs.NewMem()
		q := openQueue(t, fs, 8, 4)
		var flushed, appended int64
		for range 3 {
			n := appended + rng.Int64N(20)
			appendRange(t, q, appended, n)
			appended = n
			if rng.IntN(2) == 0 {
				if err := q.Flush(); err != nil {
					t.Fatal(err)
				}
				flushed = appended
			}
		}
		fs.CrashWith(rng)
		q = openQueue(t, fs, 8, 4)
		maxOff := q.MaxOffset()
		if maxOff < flushed || maxOff > appended || q.MinOffset() != 0 {
			t.Fatalf("round %d: recovered [%d, %d), flushed %d appended %d", round, q.MinOffset(), maxOff, flushed, appended)
		}
		checkRange(t, q, 0, maxOff, 5)
		for _, name := range listDir(t, fs) {
			fi, _ := fs.Stat(testDir + "/" + name)
			if fi.Size()%EntrySize != 0 {
				t.Fatalf("round %d: %s has a partial entry after recovery", round, name)
			}
		}
		appendRange(t, q, maxOff, maxOff+10)
		checkRange(t, q, 0, maxOff+10, 5)
	}
}

// writeRaw writes bytes into a segment file behind the queue's back.
func writeRaw(t *testing.T, fs vfs.FS, name string, off int64, b []byte) {
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

func TestRecoveryDropsTornAndZeroTail(t *testing.T) {
	encoded := func(i int64) []byte {
		b := make([]byte, EntrySize)
		putEntry(b, entryFor(i))
		return b
	}
	cases := []struct {
		name    string
		garbage func(t *testing.T, fs vfs.FS)
		wantMax int64
	}{
		{"partial entry", func(t *testing.T, fs vfs.FS) {
			writeRaw(t, fs, segmentName(10), 4*EntrySize, encoded(14)[:7])
		}, 14},
		{"zero entries", func(t *testing.T, fs vfs.FS) {
			writeRaw(t, fs, segmentName(10), 4*EntrySize, make([]byte, 3*EntrySize))
		}, 14},
		{"valid entry after a hole", func(t *testing.T, fs vfs.FS) {
			writeRaw(t, fs, segmentName(10), 5*EntrySize, encoded(15))
		}, 14},
		{"hole in the previous segment", func(t *testing.T, fs vfs.FS) {
			writeRaw(t, fs, segmentName(0), 6*EntrySize, make([]byte, EntrySize))
		}, 6},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			q := openQueue(t, fs, 10, 0)
			appendRange(t, q, 0, 14)
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			tc.garbage(t, fs)
			q = openQueue(t, fs, 10, 0)
			checkBounds(t, q, 0, tc.wantMax)
			checkRange(t, q, 0, tc.wantMax, 3)
			// The cut is durable: appending and crashing cannot revive garbage.
			appendRange(t, q, tc.wantMax, tc.wantMax+1)
			fs.Crash()
			q = openQueue(t, fs, 10, 0)
			checkBounds(t, q, 0, tc.wantMax)
		})
	}
}

func TestReAppendAndErrors(t *testing.T) {
	q := openQueue(t, vfs.NewMem(), 10, 4)
	appendRange(t, q, 0, 12)
	for _, i := range []int64{0, 5, 11} {
		if err := q.Append(i, entryFor(i)); err != nil {
			t.Fatalf("idempotent re-append %d: %v", i, err)
		}
	}
	if err := q.Append(5, entryFor(6)); !errors.Is(err, ErrConflict) {
		t.Fatalf("conflicting re-append: %v", err)
	}
	if err := q.Append(13, entryFor(13)); !errors.Is(err, ErrGap) {
		t.Fatalf("gap: %v", err)
	}
	for _, e := range []Entry{{PhysOffset: 1, Size: 0}, {PhysOffset: -1, Size: 5}, filler} {
		if err := q.Append(12, e); !errors.Is(err, ErrInvalidEntry) {
			t.Fatalf("invalid %+v: %v", e, err)
		}
	}
	checkBounds(t, q, 0, 12)
}

func TestTruncatePhys(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 10, 4)
	appendRange(t, q, 0, 25)
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := q.TruncatePhys(entryFor(12).PhysOffset); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, q, 0, 12)
	checkRange(t, q, 0, 12, 5)
	if got := q.LastPhysEnd(); got != entryFor(11).PhysOffset+90 {
		t.Fatalf("LastPhysEnd %d", got)
	}
	if got := listDir(t, fs); len(got) != 2 {
		t.Fatalf("files after truncate: %v", got)
	}
	// Durable without a Flush.
	fs.Crash()
	q = openQueue(t, fs, 10, 4)
	checkBounds(t, q, 0, 12)
	appendRange(t, q, 12, 20)
	// Cut exactly at a segment boundary.
	if err := q.TruncatePhys(entryFor(10).PhysOffset); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, q, 0, 10)
	if err := q.TruncatePhys(entryFor(10).PhysOffset); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	q = openQueue(t, fs, 10, 4)
	checkBounds(t, q, 0, 10)
	checkRange(t, q, 0, 10, 3)
	// Everything.
	if err := q.TruncatePhys(0); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, q, 0, 0)
	if q.LastPhysEnd() != 0 {
		t.Fatal("LastPhysEnd of an empty queue")
	}
	appendRange(t, q, 0, 3)
	checkRange(t, q, 0, 3, 3)
}

func TestDeleteBeforePhys(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 10, 4)
	appendRange(t, q, 0, 35)
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	removed, err := q.DeleteBeforePhys(entryFor(23).PhysOffset)
	if err != nil || removed != 2 {
		t.Fatalf("removed %d, %v", removed, err)
	}
	checkBounds(t, q, 23, 35)
	if _, err := q.Get(22, make([]Entry, 1)); !errors.Is(err, ErrOffsetTooSmall) {
		t.Fatalf("get below min: %v", err)
	}
	checkRange(t, q, 23, 35, 4)
	// After a restart the min is re-derived by calling DeleteBeforePhys again.
	fs.Crash()
	q = openQueue(t, fs, 10, 4)
	checkBounds(t, q, 20, 35)
	if removed, err := q.DeleteBeforePhys(entryFor(23).PhysOffset); err != nil || removed != 0 {
		t.Fatalf("removed %d, %v", removed, err)
	}
	checkBounds(t, q, 23, 35)
	// Retiring everything keeps the newest segment, so MaxOffset survives.
	if removed, err := q.DeleteBeforePhys(1 << 40); err != nil || removed != 1 {
		t.Fatalf("removed %d, %v", removed, err)
	}
	checkBounds(t, q, 35, 35)
	fs.Crash()
	q = openQueue(t, fs, 10, 4)
	checkBounds(t, q, 30, 35)
	appendRange(t, q, 35, 37)
	checkRange(t, q, 30, 37, 4)
}

func TestRestartAtOffset(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 100, 4)
	if err := q.Append(1234, entryFor(1234)); err != nil {
		t.Fatal(err)
	}
	appendRange(t, q, 1235, 1240)
	checkBounds(t, q, 1234, 1240)
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	q = openQueue(t, fs, 100, 4)
	checkBounds(t, q, 1234, 1240)
	checkRange(t, q, 1234, 1240, 3)
	if err := q.Append(2000, entryFor(2000)); !errors.Is(err, ErrGap) {
		t.Fatalf("gap on a live queue: %v", err)
	}
	// A fully retired queue may jump again.
	if _, err := q.DeleteBeforePhys(1 << 40); err != nil {
		t.Fatal(err)
	}
	if err := q.Append(5000, entryFor(5000)); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, q, 5000, 5001)
	if got := listDir(t, fs); !slices.Equal(got, []string{segmentName(5000)}) {
		t.Fatalf("files %v", got)
	}
	if err := q.TruncatePhys(0); err != nil {
		t.Fatal(err)
	}
	checkBounds(t, q, 5000, 5000)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQueue(t, fs, 100, 4)
	checkBounds(t, q, 5000, 5000)
}

func TestSearchOffset(t *testing.T) {
	q := openQueue(t, vfs.NewMem(), 10, 4)
	storeTime := func(e Entry) (int64, error) { return 5000 + (e.PhysOffset-1000)/100*10, nil } // offset i at 5000+10i
	if off, err := q.SearchOffset(1, storeTime); err != nil || off != 0 {
		t.Fatalf("empty queue: %d %v", off, err)
	}
	appendRange(t, q, 0, 35)
	cases := []struct{ ts, want int64 }{
		{0, 0},        // all newer -> min
		{5000, 0},     // exact first
		{5001, 1},     // between
		{5100, 10},    // exact, segment boundary
		{5340, 34},    // exact last
		{5341, 35},    // all older -> max
		{1 << 50, 35}, // all older -> max
	}
	for _, c := range cases {
		if off, err := q.SearchOffset(c.ts, storeTime); err != nil || off != c.want {
			t.Fatalf("ts %d: %d %v, want %d", c.ts, off, err, c.want)
		}
	}
	if _, err := q.DeleteBeforePhys(entryFor(17).PhysOffset); err != nil {
		t.Fatal(err)
	}
	if off, _ := q.SearchOffset(0, storeTime); off != 17 {
		t.Fatalf("after retention: %d", off)
	}
	boom := errors.New("record gone")
	if _, err := q.SearchOffset(5100, func(Entry) (int64, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("callback error: %v", err)
	}
}

func TestConcurrentGetDuringAppend(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 100, 50)
	const total = 3000
	var done atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // flusher
		defer wg.Done()
		for !done.Load() {
			if err := q.Flush(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 9))
			dst := make([]Entry, 64)
			for !done.Load() {
				maxOff := q.MaxOffset()
				if maxOff == 0 {
					continue
				}
				off := rng.Int64N(maxOff)
				n, err := q.Get(off, dst[:1+rng.IntN(64)])
				if err != nil || n == 0 {
					t.Errorf("get %d (max %d): n=%d err=%v", off, maxOff, n, err)
					return
				}
				for i, e := range dst[:n] {
					if e != entryFor(off+int64(i)) {
						t.Errorf("entry %d = %+v", off+int64(i), e)
						return
					}
				}
			}
		}()
	}
	appendRange(t, q, 0, total)
	done.Store(true)
	wg.Wait()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	q = openQueue(t, fs, 100, 50)
	checkBounds(t, q, 0, total)
}

func TestFlushErrorIsSticky(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	q := openQueue(t, efs, 10, 4)
	appendRange(t, q, 0, 3)
	efs.InjectOnce(vfs.OpSync, "/consumequeue/")
	if err := q.Flush(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("flush: %v", err)
	}
	if err := q.Flush(); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("second flush after a failed one: %v", err)
	}
	if err := q.Close(); err == nil {
		t.Fatal("close hid the flush failure")
	}
}

func TestWriteErrorLeavesQueueUsable(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	// One entry of write-behind: Append(n) writes entry n-1.
	q, err := Open(Config{FS: efs, Dir: testDir, Topic: "TopicA", QueueID: 3, EntriesPerSegment: 10, TailCacheEntries: 4, WriteBehindEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	appendRange(t, q, 0, 3)
	efs.InjectOnce(vfs.OpWrite, "")
	if err := q.Append(3, entryFor(3)); !errors.Is(err, vfs.ErrInjected) {
		t.Fatalf("append: %v", err)
	}
	checkBounds(t, q, 0, 3)
	appendRange(t, q, 3, 5)
	checkRange(t, q, 0, 5, 2)
}

func TestNewQueueDirectoriesAreDurable(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 10, 4)
	appendRange(t, q, 0, 3)
	if err := q.Flush(); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	q = openQueue(t, fs, 10, 4)
	checkBounds(t, q, 0, 3)
}

func TestGetReportsCorruptEntry(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 10, 2)
	appendRange(t, q, 0, 30)
	writeRaw(t, fs, segmentName(0), 4*EntrySize, make([]byte, EntrySize))
	if _, err := q.Get(2, make([]Entry, 5)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("get over a zeroed entry: %v", err)
	}
}

func TestDestroy(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 10, 4)
	appendRange(t, q, 0, 15)
	if err := q.Destroy(); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Stat(testDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir still there: %v", err)
	}
	if err := q.Append(15, entryFor(15)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after destroy: %v", err)
	}
	fs.Crash()
	if _, err := fs.Stat(testDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dir back after crash: %v", err)
	}
}

func TestConfigMismatchIsReported(t *testing.T) {
	fs := vfs.NewMem()
	q := openQueue(t, fs, 10, 4)
	appendRange(t, q, 0, 25)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{FS: fs, Dir: testDir, EntriesPerSegment: 5}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("smaller EntriesPerSegment: %v", err)
	}
	if err := fs.Remove(testDir + "/" + segmentName(10)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(Config{FS: fs, Dir: testDir, EntriesPerSegment: 10}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("missing middle segment: %v", err)
	}
	if _, err := Open(Config{FS: fs}); err == nil {
		t.Fatal("config without Dir accepted")
	}
}

// rounds returns n, or 50 times n when KEEL_LONG=1.
func rounds(n int) int {
	if os.Getenv("KEEL_LONG") == "1" {
		return 50 * n
	}
	return n
}
