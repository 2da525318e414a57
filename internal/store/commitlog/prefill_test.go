package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

const prefillTestSeg = 8 << 20

// openPrefillLog opens a log with prefill on and runs its prefiller until
// the test ends.
func openPrefillLog(t *testing.T, fs vfs.FS, window int64, opts RecoverOptions) (*Log, RecoverResult) {
	t.Helper()
	l, err := Open(Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: prefillTestSeg, PrefillBytes: window})
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Recover(opts)
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); l.RunPrefiller(stop) }()
	t.Cleanup(func() { close(stop); <-done; l.Close() })
	return l, res
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitPrefilled(t *testing.T, l *Log, upTo int64) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("zero-filled up to %d", upTo), func() bool { return l.prefillAhead.Load() >= upTo })
}

func TestPrefillKeepsZeroedRoomAheadAndTrims(t *testing.T) {
	fs := vfs.NewMem()
	const window = 3 << 20
	l, _ := openPrefillLog(t, fs, window, RecoverOptions{})
	all := appendAll(t, l, rec(1000, 1))
	end := l.WrittenOffset()
	waitPrefilled(t, l, end+window)
	if size := segmentSize(t, fs, 0); size != end+window {
		t.Fatalf("segment is %d bytes, want written %d + window %d", size, end, window)
	}
	all = append(all, appendAll(t, l, rec(2000, 2), rec(3000, 3))...)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	checkReadable(t, l, all)
	// Zeros past the written offset, synced: a crash now keeps them.
	crashed := fs.CrashClone()
	f, err := crashed.OpenFile("/data/commitlog/"+SegmentName(0), os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail := make([]byte, 4096)
	if _, err := f.ReadAt(tail, l.WrittenOffset()); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !bytes.Equal(tail, make([]byte, len(tail))) {
		t.Fatal("bytes past the written offset are not zero")
	}

	if err := l.TrimPrefill(); err != nil {
		t.Fatal(err)
	}
	if size := segmentSize(t, fs, 0); size != l.WrittenOffset() {
		t.Fatalf("after TrimPrefill the segment is %d bytes, want %d", size, l.WrittenOffset())
	}
}

// TestPrefillPowerLoss: power lost with zero-filled room ahead; every
// flushed record survives, the zeros are cut as such (not reported torn)
// and appends continue right after the last record.
func TestPrefillPowerLoss(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	for round := range 30 {
		rng := rand.New(rand.NewPCG(seed, uint64(round)))
		fs := vfs.NewMem()
		l, _ := openPrefillLog(t, fs, 1<<20, RecoverOptions{})
		var durable []appended
		for range rng.IntN(40) + 1 {
			got := appendAll(t, l, rec(rng.IntN(3000)+16, byte(rng.Uint32())))
			if rng.IntN(2) == 0 {
				if err := l.Flush(); err != nil {
					t.Fatal(err)
				}
				durable = append(durable, got...)
			}
			if rng.IntN(4) == 0 {
				waitPrefilled(t, l, l.WrittenOffset()+1)
			}
		}
		crashed := fs.CrashCloneWith(rng)
		l2, res := openPrefillLog(t, crashed, 1<<20, RecoverOptions{Crashed: true, DurableFrom: l.FlushedOffset(), QuarantineDir: "/data/quarantine"})
		if len(durable) > 0 {
			last := durable[len(durable)-1]
			if res.End < last.phys+int64(len(last.rec))+TrailerBytes {
				t.Fatalf("seed %d round %d: end %d lost flushed records", seed, round, res.End)
			}
		}
		checkReadable(t, l2, durable)
		if segmentSize(t, crashed, 0) != res.End {
			t.Fatalf("seed %d round %d: segment %d bytes after recovery, end %d", seed, round, segmentSize(t, crashed, 0), res.End)
		}
		more := appendAll(t, l2, rec(500, 7))
		if more[0].phys != res.End {
			t.Fatalf("append after recovery at %d, want %d", more[0].phys, res.End)
		}
		waitPrefilled(t, l2, l2.WrittenOffset()+1) // zero-filling resumes after the last record
		checkReadable(t, l2, append(durable, more...))
	}
}

// zeroGateFS blocks the prefiller's zero writes (whole chunks) while the
// gate is closed.
type zeroGateFS struct {
	vfs.FS
	gate    chan struct{}
	blocked atomic.Int32
}

type zeroGateFile struct {
	vfs.File
	fs *zeroGateFS
}

func (g *zeroGateFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return zeroGateFile{f, g}, nil
}

func (f zeroGateFile) WriteAt(p []byte, off int64) (int, error) {
	if len(p) == prefillChunkBytes && bytes.Equal(p, make([]byte, len(p))) {
		f.fs.blocked.Add(1)
		<-f.fs.gate
	}
	return f.File.WriteAt(p, off)
}

// TestWriteWaitsForOverlappingZeroFill: a write that reaches the chunk the
// prefiller is zeroing waits for it, so the zeros can never land on
// records. (Without the wait, the records written meanwhile are zeroed
// when the gate opens.)
func TestWriteWaitsForOverlappingZeroFill(t *testing.T) {
	g := &zeroGateFS{FS: vfs.NewMem(), gate: make(chan struct{})}
	l, _ := openPrefillLog(t, g, 2<<20, RecoverOptions{})
	var open sync.Once
	release := func() { open.Do(func() { close(g.gate) }) }
	t.Cleanup(release)                     // before the prefiller is stopped, also on failure
	first := appendAll(t, l, rec(1000, 1)) // wakes the prefiller
	waitUntil(t, "the prefiller to start a chunk", func() bool { return g.blocked.Load() > 0 })
	var wg sync.WaitGroup
	var more []appended
	wg.Go(func() {
		for range 40 { // 40 x 32 KiB: well into the chunk being zeroed
			more = append(more, appendAll(t, l, rec(32<<10, 2))...)
		}
	})
	waitUntil(t, "the writer to wait for the chunk being zeroed", func() bool {
		l.prefillMu.Lock()
		defer l.prefillMu.Unlock()
		return l.pf.waitingForZeroes > 0
	})
	release()
	wg.Wait()
	checkReadable(t, l, append(first, more...))
}

// TestPrefillStopsShortOfTheSegmentEnd: zero-filling stops prefillMargin
// before the end of a segment, so a batch that closes the segment on a full
// disk is refused by its write to the old segment (retryable, nothing
// published) instead of failing the log when it reaches the next one.
// (Prefilled to the very end, the old segment's part succeeds and the
// next segment's write fails with records already published.)
func TestPrefillStopsShortOfTheSegmentEnd(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	l, err := Open(Config{FS: efs, Dir: "/data/commitlog", SegmentBytes: prefillTestSeg, PrefillBytes: prefillTestSeg})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Recover(RecoverOptions{}); err != nil {
		t.Fatal(err)
	}
	const n = 32 << 10
	for l.WrittenOffset()+2*(n+TrailerBytes)+BlankBytes <= prefillTestSeg {
		appendAll(t, l, rec(n, 1))
		for l.prefillOnce(make([]byte, prefillChunkBytes)) { // the prefiller, run in line
		}
	}
	limit := max(l.WrittenOffset(), prefillTestSeg-l.prefillMargin())
	if size := segmentSize(t, efs, 0); size > limit {
		t.Fatalf("segment zero-filled to %d bytes, beyond %d", size, limit)
	}
	efs.SetFreeBytes(0)
	written := l.WrittenOffset()
	_, err = l.Append([][]byte{rec(n, 2), rec(n, 3)}, nil) // closes segment 0
	if !errors.Is(err, ErrNoSpace) || errors.Is(err, ErrFailed) || l.Err() != nil {
		t.Fatalf("a batch closing a segment on a full disk: %v (log: %v)", err, l.Err())
	}
	if l.WrittenOffset() != written {
		t.Fatalf("written offset moved from %d to %d", written, l.WrittenOffset())
	}
	efs.SetFreeBytes(-1)
	appendAll(t, l, rec(n, 4), rec(n, 5))
}

// overlapFS counts the fdatasyncs in progress per file and keeps the most
// seen at once; each takes a little while, so that calls that may overlap
// do.
type overlapFS struct {
	vfs.FS
	mu     sync.Mutex
	active map[string]int
	most   int
}

type overlapFile struct {
	vfs.File
	fs *overlapFS
}

func (o *overlapFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := o.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &overlapFile{File: f, fs: o}, nil
}

func (f *overlapFile) Sync() error {
	o, name := f.fs, f.Name()
	o.mu.Lock()
	o.active[name]++
	o.most = max(o.most, o.active[name])
	o.mu.Unlock()
	time.Sleep(200 * time.Microsecond)
	err := f.File.Sync()
	o.mu.Lock()
	o.active[name]--
	o.mu.Unlock()
	return err
}

// TestSegmentSyncsNeverOverlap: the flusher's and the prefiller's
// fdatasyncs of one segment never run at once. Linux reports a writeback
// error to one fdatasync of an open file only, so a flush overlapping the
// prefiller's failed call could return success for bytes that were lost,
// and acknowledge them.
func TestSegmentSyncsNeverOverlap(t *testing.T) {
	fs := &overlapFS{FS: vfs.NewMem(), active: map[string]int{}}
	l, _ := openPrefillLog(t, fs, 64<<10, RecoverOptions{})
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); l.RunFlusher(stop, 0) }()
	defer func() { close(stop); <-done }()
	for i := range 3000 {
		appendAll(t, l, rec(600, byte(i)))
		if i%3 == 0 {
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.most > 1 {
		t.Fatalf("%d fdatasyncs of one segment ran at once", fs.most)
	}
}

// gateFS holds the first fdatasync of the first segment after arm until
// release, and reports the removal of that segment.
type gateFS struct {
	vfs.FS
	armed            atomic.Bool
	entered, release chan struct{}
	removed          chan struct{}
	removeOnce       sync.Once
}

type gateFile struct {
	vfs.File
	fs *gateFS
}

const gateSegment = "/data/commitlog/00000000000000000000"

func (g *gateFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := g.FS.OpenFile(name, flag, perm)
	if err != nil || name != gateSegment {
		return f, err
	}
	return &gateFile{File: f, fs: g}, nil
}

func (g *gateFS) Remove(name string) error {
	if name == gateSegment {
		g.removeOnce.Do(func() { close(g.removed) })
	}
	return g.FS.Remove(name)
}

func (f *gateFile) Sync() error {
	if f.fs.armed.CompareAndSwap(true, false) {
		close(f.fs.entered)
		<-f.fs.release
	}
	return f.File.Sync()
}

// TestTruncateWaitsForPrefillSync: a truncation that removes the segment
// the prefiller is syncing waits for that fdatasync to end. Before, it
// waited for the zero write only, closed the file under the fdatasync,
// and the fdatasync's "file already closed" failed the log (a replica cut
// to its master's point went read-only until restart).
func TestTruncateWaitsForPrefillSync(t *testing.T) {
	fs := &gateFS{FS: vfs.NewMem(), entered: make(chan struct{}), release: make(chan struct{}), removed: make(chan struct{})}
	l, err := Open(Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: prefillTestSeg, PrefillBytes: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Recover(RecoverOptions{}); err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); l.RunPrefiller(stop) }()
	stopped := false
	stopPrefiller := func() {
		if !stopped {
			stopped = true
			close(stop)
			<-done
		}
	}
	defer stopPrefiller()
	released := false
	defer func() {
		if !released {
			close(fs.release)
		}
	}()

	fs.armed.Store(true)
	appendAll(t, l, rec(600, 1)) // wakes the prefiller, whose fdatasync is held
	<-fs.entered
	truncated := make(chan error, 1)
	go func() { truncated <- l.Truncate(0) }()
	select {
	case <-fs.removed:
		t.Error("Truncate removed the segment while the prefiller's fdatasync of it ran")
	case err := <-truncated:
		t.Errorf("Truncate returned while the prefiller's fdatasync of the segment ran: %v", err)
	case <-time.After(100 * time.Millisecond): // not removed meanwhile
	}
	close(fs.release)
	released = true
	if err := <-truncated; err != nil {
		t.Fatalf("truncate: %v", err)
	}
	stopPrefiller() // its last chunk is done
	if err := l.Err(); err != nil {
		t.Fatalf("the log failed: %v", err)
	}
	if got := l.WrittenOffset(); got != 0 {
		t.Fatalf("written %d after truncating at 0", got)
	}
}
