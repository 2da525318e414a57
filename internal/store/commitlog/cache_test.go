package commitlog

import (
	"errors"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// dropFS records the page-cache releases of the files it opens.
type dropFS struct {
	vfs.FS
	mu    sync.Mutex
	drops []dropCall
	err   error // returned by every DropCache if set
}

type dropCall struct {
	path   string
	off, n int64
}

type dropFile struct {
	vfs.File
	fs *dropFS
}

func (fs *dropFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return dropFile{f, fs}, nil
}

func (f dropFile) DropCache(off, n int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	f.fs.drops = append(f.fs.drops, dropCall{f.Name(), off, n})
	return f.fs.err
}

func (fs *dropFS) calls() []dropCall {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return slices.Clone(fs.drops)
}

const cacheTestSeg = 16 << 20

// openWindowLog opens and recovers a log that keeps window bytes of page
// cache behind the flushed offset, without running its trimmer; the
// caller closes it.
func openWindowLog(t *testing.T, fs vfs.FS, window int64) *Log {
	t.Helper()
	l, _ := openConfigured(t, Config{FS: fs, Dir: "/data/commitlog", SegmentBytes: cacheTestSeg, CacheWindowBytes: window}, RecoverOptions{})
	return l
}

// openCacheLog opens a log like openWindowLog and runs its trimmer until
// the test ends.
func openCacheLog(t *testing.T, fs vfs.FS, window int64) *Log {
	t.Helper()
	l := openWindowLog(t, fs, window)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); l.RunCacheTrimmer(stop) }()
	t.Cleanup(func() { close(stop); <-done; l.Close() })
	return l
}

// appendBytes appends records of 64 KiB until about n more bytes are written.
func appendBytes(t *testing.T, l *Log, n int64) {
	t.Helper()
	for end := l.WrittenOffset() + n; l.WrittenOffset() < end; {
		appendAll(t, l, rec(64<<10-TrailerBytes, byte(l.WrittenOffset()>>16)))
	}
}

// checkReleases checks that the releases cover [from, to) of the log in
// order, without gaps or overlaps, each within one segment and at most a
// chunk long.
func checkReleases(t *testing.T, calls []dropCall, from, to int64) {
	t.Helper()
	pos := from
	for _, c := range calls {
		base, ok := ParseSegmentName(c.path[len("/data/commitlog/"):])
		if !ok {
			t.Fatalf("release of %s, not a segment", c.path)
		}
		if base+c.off != pos {
			t.Fatalf("release [%d, %d) of segment %d: want it to start at log offset %d", c.off, c.off+c.n, base, pos)
		}
		if c.n <= 0 || c.n > cacheDropChunk || c.off+c.n > cacheTestSeg {
			t.Fatalf("release [%d, %d) of segment %d: empty, longer than a chunk or past the segment", c.off, c.off+c.n, base)
		}
		pos += c.n
	}
	if pos != to {
		t.Fatalf("releases cover [%d, %d), want [%d, %d)", from, pos, from, to)
	}
}

func TestCacheTrimmerReleasesFlushedBytesBehindTheWindow(t *testing.T) {
	fs := &dropFS{FS: vfs.NewMem()}
	const window = 4 << 20
	l := openCacheLog(t, fs, window)

	// Written but not flushed: nothing may be released (its pages are dirty).
	appendBytes(t, l, 40<<20)
	if l.dropCacheOnce() || len(fs.calls()) != 0 {
		t.Fatal("released page cache of bytes not flushed")
	}
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	flushed := l.FlushedOffset()
	limit := flushed - window
	// Everything a whole chunk behind the window goes, up to the window.
	waitUntil(t, "released up to the window", func() bool { return limit-l.cacheDropped.Load() < cacheDropChunk })
	got := l.cacheDropped.Load()
	if got > limit {
		t.Fatalf("released up to %d, inside the window (flushed %d - window %d)", got, flushed, window)
	}
	checkReleases(t, fs.calls(), 0, got)

	// More flushed bytes move the window on from where it stopped.
	appendBytes(t, l, 24<<20)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	limit = l.FlushedOffset() - window
	waitUntil(t, "released up to the moved window", func() bool { return limit-l.cacheDropped.Load() < cacheDropChunk })
	if l.cacheDropped.Load() <= got || l.cacheDropped.Load() > limit {
		t.Fatalf("released up to %d after the second flush, want in (%d, %d]", l.cacheDropped.Load(), got, limit)
	}
	checkReleases(t, fs.calls(), 0, l.cacheDropped.Load())
}

func TestCacheTrimmerStartsAtTheWindowAfterRestart(t *testing.T) {
	fs := &dropFS{FS: vfs.NewMem()}
	const window = 4 << 20
	func() { // a first life without a trimmer
		l := openWindowLog(t, fs, 0)
		defer l.Close()
		appendBytes(t, l, 30<<20)
		if err := l.Flush(); err != nil {
			t.Fatal(err)
		}
	}()
	l := openCacheLog(t, fs, window)
	start := l.FlushedOffset() - window
	appendBytes(t, l, 20<<20)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	limit := l.FlushedOffset() - window
	waitUntil(t, "released up to the window", func() bool { return limit-l.cacheDropped.Load() < cacheDropChunk })
	// What the log held when the trimmer started, older than its window,
	// was left to the kernel.
	checkReleases(t, fs.calls(), start, l.cacheDropped.Load())
}

func TestCacheTrimmerStopsAfterAFailedRelease(t *testing.T) {
	fs := &dropFS{FS: vfs.NewMem(), err: errors.New("fadvise: not supported")}
	l := openCacheLog(t, fs, 4<<20)
	appendBytes(t, l, 30<<20)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a release attempt", func() bool { return len(fs.calls()) > 0 })
	waitUntil(t, "releasing switched off", l.cacheOff.Load)
	appendBytes(t, l, 30<<20)
	if err := l.Flush(); err != nil {
		t.Fatalf("the log must go on after a failed release: %v", err)
	}
	if n := len(fs.calls()); n != 1 {
		t.Fatalf("%d release attempts, want 1 (releasing stops after a failure)", n)
	}
	if l.Err() != nil {
		t.Fatalf("a failed release failed the log: %v", l.Err())
	}
}

func TestCacheTrimmerOffByDefault(t *testing.T) {
	fs := &dropFS{FS: vfs.NewMem()}
	l := openCacheLog(t, fs, 0)
	appendBytes(t, l, 30<<20)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(l.cacheKick) != 0 || len(fs.calls()) != 0 {
		t.Fatal("released page cache without a window")
	}
}

func TestCacheTrimmerSkipsRemovedSegments(t *testing.T) {
	fs := &dropFS{FS: vfs.NewMem()}
	const window = 4 << 20
	l := openWindowLog(t, fs, window)
	defer l.Close()
	appendBytes(t, l, 50<<20)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// Retention removes the first two segments before the trimmer (driven
	// by hand here) got to them.
	if removed, err := l.DeleteBefore(2 * cacheTestSeg); err != nil || len(removed) != 2 {
		t.Fatalf("DeleteBefore removed %v, %v; want the first two segments", removed, err)
	}
	for l.dropCacheOnce() {
	}
	if l.cacheOff.Load() {
		t.Fatal("a removed segment switched releasing off")
	}
	limit := l.FlushedOffset() - window
	if got := l.cacheDropped.Load(); got <= 2*cacheTestSeg || limit-got >= cacheDropChunk {
		t.Fatalf("released up to %d, want past the removed segments and within a chunk of %d", got, limit)
	}
	checkReleases(t, fs.calls(), 2*cacheTestSeg, l.cacheDropped.Load())
}
