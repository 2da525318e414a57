package vfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

func mustOpen(t testing.TB, fs FS, name string, flag int) File {
	t.Helper()
	f, err := fs.OpenFile(name, flag, 0o644)
	if err != nil {
		t.Fatalf("open %s: %v", name, err)
	}
	return f
}

func mustWrite(t testing.TB, f File, off int64, p []byte) {
	t.Helper()
	if n, err := f.WriteAt(p, off); err != nil || n != len(p) {
		t.Fatalf("write %s at %d: n=%d err=%v", f.Name(), off, n, err)
	}
}

func mustSync(t testing.TB, f File) {
	t.Helper()
	if err := f.Sync(); err != nil {
		t.Fatalf("sync %s: %v", f.Name(), err)
	}
}

func mustSyncDir(t testing.TB, fs FS, dir string) {
	t.Helper()
	if err := fs.SyncDir(dir); err != nil {
		t.Fatalf("syncdir %s: %v", dir, err)
	}
}

// readAll reads the whole file name from fs.
func readAll(t testing.TB, fs FS, name string) []byte {
	t.Helper()
	f := mustOpen(t, fs, name, os.O_RDONLY)
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	if n, err := f.ReadAt(buf, 0); n != len(buf) || (err != nil && err != io.EOF) {
		t.Fatalf("read %s: n=%d err=%v", name, n, err)
	}
	return buf
}

func exists(fs FS, name string) bool {
	_, err := fs.Stat(name)
	return err == nil
}

func TestMemReadWriteBasics(t *testing.T) {
	fs := NewMem()
	if err := fs.MkdirAll("/d/e", 0o755); err != nil {
		t.Fatal(err)
	}
	f := mustOpen(t, fs, "/d/e/f", os.O_RDWR|os.O_CREATE)
	mustWrite(t, f, 10_000, []byte("tail")) // sparse: a hole before
	if size, _ := f.Size(); size != 10_004 {
		t.Fatalf("size %d", size)
	}
	buf := make([]byte, 10)
	if n, err := f.ReadAt(buf, 9_998); n != 6 || err != io.EOF || !bytes.Equal(buf[:6], []byte("\x00\x00tail")) {
		t.Fatalf("read across hole: n=%d err=%v %q", n, err, buf[:n])
	}
	if n, err := f.ReadAt(buf, 20_000); n != 0 || err != io.EOF {
		t.Fatalf("read past end: n=%d err=%v", n, err)
	}
	// Shrinking then growing must read zeros, within the same page too.
	mustWrite(t, f, 0, bytes.Repeat([]byte{7}, 8000))
	if err := f.Truncate(100); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(9000); err != nil {
		t.Fatal(err)
	}
	got := readAll(t, fs, "/d/e/f")
	want := append(bytes.Repeat([]byte{7}, 100), make([]byte, 8900)...)
	if !bytes.Equal(got, want) {
		t.Fatalf("shrink+grow did not read zeros")
	}

	if _, err := fs.OpenFile("/d/e/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0); !errors.Is(err, os.ErrExist) {
		t.Fatalf("O_EXCL on existing: %v", err)
	}
	if _, err := fs.OpenFile("/d/e/missing", os.O_RDONLY, 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("open missing: %v", err)
	}
	if _, err := fs.OpenFile("/nodir/x", os.O_RDWR|os.O_CREATE, 0); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("create in missing dir: %v", err)
	}
	if _, err := fs.OpenFile("/d", os.O_RDONLY, 0); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("open dir: %v", err)
	}
	ro := mustOpen(t, fs, "/d/e/f", os.O_RDONLY)
	if _, err := ro.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("write on read-only handle: %v", err)
	}
	tr := mustOpen(t, fs, "/d/e/f", os.O_RDWR|os.O_TRUNC)
	if size, _ := tr.Size(); size != 0 {
		t.Fatalf("O_TRUNC left %d bytes", size)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
	if err := fs.Remove("/d/e"); !errors.Is(err, syscall.ENOTEMPTY) {
		t.Fatalf("remove non-empty dir: %v", err)
	}
	names, err := fs.List("/d/e")
	if err != nil || !slices.Equal(names, []string{"f"}) {
		t.Fatalf("list: %v %v", names, err)
	}
}

func TestMemCrashKeepsOnlySyncedBytes(t *testing.T) {
	fs := NewMem()
	f := mustOpen(t, fs, "/f", os.O_RDWR|os.O_CREATE)
	mustSyncDir(t, fs, "/")
	mustWrite(t, f, 0, []byte("durable-"))
	mustSync(t, f)
	mustWrite(t, f, 8, []byte("lost"))
	mustWrite(t, f, 0, []byte("XX")) // overwrite of synced bytes is lost too
	fs.Crash()
	if got := readAll(t, fs, "/f"); string(got) != "durable-" {
		t.Fatalf("after crash: %q", got)
	}
	// Truncation is a data change too: unsynced, it is undone.
	f = mustOpen(t, fs, "/f", os.O_RDWR)
	if err := f.Truncate(3); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	if got := readAll(t, fs, "/f"); string(got) != "durable-" {
		t.Fatalf("unsynced truncate survived: %q", got)
	}
}

func TestMemCrashDirectoryEntries(t *testing.T) {
	fs := NewMem()
	if err := fs.MkdirAll("/a/b", 0o755); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, fs, "/")
	mustSyncDir(t, fs, "/a")
	for _, n := range []string{"keep", "gone", "old", "removed"} {
		f := mustOpen(t, fs, "/a/b/"+n, os.O_RDWR|os.O_CREATE)
		mustWrite(t, f, 0, []byte(n))
		mustSync(t, f)
		f.Close()
	}
	if err := fs.Remove("/a/b/gone"); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, fs, "/a/b")
	// Not made durable: a create, a rename, a removal, a new directory.
	f := mustOpen(t, fs, "/a/b/new", os.O_RDWR|os.O_CREATE)
	mustWrite(t, f, 0, []byte("synced data, unsynced entry"))
	mustSync(t, f)
	if err := fs.Rename("/a/b/old", "/a/b/renamed"); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove("/a/b/removed"); err != nil {
		t.Fatal(err)
	}
	if err := fs.MkdirAll("/a/c", 0o755); err != nil {
		t.Fatal(err)
	}
	fs.Crash()
	names, err := fs.List("/a/b")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"keep", "old", "removed"}; !slices.Equal(names, want) {
		t.Fatalf("entries after crash %v, want %v", names, want)
	}
	if got := readAll(t, fs, "/a/b/removed"); string(got) != "removed" {
		t.Fatalf("removed file came back with %q", got)
	}
	if exists(fs, "/a/c") {
		t.Fatal("unsynced directory survived")
	}
	// A rename made durable stays.
	if err := fs.Rename("/a/b/old", "/a/b/renamed"); err != nil {
		t.Fatal(err)
	}
	mustSyncDir(t, fs, "/a/b")
	fs.Crash()
	if exists(fs, "/a/b/old") || string(readAll(t, fs, "/a/b/renamed")) != "old" {
		t.Fatal("synced rename reverted")
	}
}

func TestMemCrashInvalidatesHandlesAndLocks(t *testing.T) {
	fs := NewMem()
	f := mustOpen(t, fs, "/f", os.O_RDWR|os.O_CREATE)
	mustSyncDir(t, fs, "/")
	lock, err := fs.Lock("/LOCK")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Lock("/LOCK"); err == nil {
		t.Fatal("second lock succeeded")
	}
	fs.Crash()
	buf := make([]byte, 1)
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("read: %v", err)
	}
	if _, err := f.WriteAt(buf, 0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("write: %v", err)
	}
	if err := f.Sync(); !errors.Is(err, ErrCrashed) {
		t.Fatalf("sync: %v", err)
	}
	if err := f.Truncate(0); !errors.Is(err, ErrCrashed) {
		t.Fatalf("truncate: %v", err)
	}
	if _, err := f.Size(); !errors.Is(err, ErrCrashed) {
		t.Fatalf("size: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close of crashed handle: %v", err)
	}
	l2, err := fs.Lock("/LOCK")
	if err != nil {
		t.Fatalf("lock after crash: %v", err)
	}
	lock.Close() // the stale lock must not release the new one
	if _, err := fs.Lock("/LOCK"); err == nil {
		t.Fatal("stale Close released the new lock")
	}
	l2.Close()
	mustOpen(t, fs, "/f", os.O_RDWR).Close()
}

// TestMemCrashWithTornPrefix checks that a torn crash keeps exactly a prefix
// of the unsynced writes, sometimes cutting one, and never more.
func TestMemCrashWithTornPrefix(t *testing.T) {
	var sawNone, sawAll, sawCut bool
	for seed := uint64(0); seed < 200; seed++ {
		fs := NewMem()
		f := mustOpen(t, fs, "/f", os.O_RDWR|os.O_CREATE)
		mustSyncDir(t, fs, "/")
		var full []byte
		for i := range 10 {
			chunk := bytes.Repeat([]byte{byte('a' + i)}, 100+i)
			mustWrite(t, f, int64(len(full)), chunk)
			full = append(full, chunk...)
			if i == 2 {
				mustSync(t, f)
			}
		}
		synced := 100 + 101 + 102
		fs.CrashWith(rand.New(rand.NewPCG(seed, 1)))
		got := readAll(t, fs, "/f")
		if len(got) < synced || !bytes.Equal(got, full[:len(got)]) {
			t.Fatalf("seed %d: kept %d bytes, not a prefix of the writes >= %d", seed, len(got), synced)
		}
		switch {
		case len(got) == synced:
			sawNone = true
		case len(got) == len(full):
			sawAll = true
		}
		if len(got) > 0 && len(got) < len(full) && got[len(got)-1] == full[len(got)] {
			sawCut = true
		}
		// The torn result is the new durable state: a second crash keeps it.
		fs.Crash()
		if again := readAll(t, fs, "/f"); !bytes.Equal(again, got) {
			t.Fatalf("seed %d: second crash changed the file", seed)
		}
	}
	if !sawNone || !sawAll || !sawCut {
		t.Fatalf("torn outcomes not all seen: none=%v all=%v cut=%v", sawNone, sawAll, sawCut)
	}
}

// A write-back crash keeps the synced bytes, and of the unsynced pages any
// subset, in no order: a later page can survive an earlier one.
func TestMemCrashCloneWriteBack(t *testing.T) {
	const pages = 6
	var sawHole, sawShort bool
	for seed := uint64(0); seed < 100; seed++ {
		fs := NewMem()
		f := mustOpen(t, fs, "/f", os.O_RDWR|os.O_CREATE)
		mustSyncDir(t, fs, "/")
		synced := bytes.Repeat([]byte{'s'}, 5000) // page 0 and part of page 1
		mustWrite(t, f, 0, synced)
		mustSync(t, f)
		full := slices.Clone(synced)
		for i := range pages * memPageSize / 1000 {
			chunk := bytes.Repeat([]byte{byte('a' + i)}, 1000)
			mustWrite(t, f, int64(len(full)), chunk)
			full = append(full, chunk...)
		}
		c := fs.CrashCloneWriteBack(rand.New(rand.NewPCG(seed, 1)))
		got := readAll(t, c, "/f")
		if len(got) != len(synced) && len(got) != len(full) {
			t.Fatalf("seed %d: %d bytes, want the synced or the new size", seed, len(got))
		}
		if !bytes.Equal(got[:len(synced)], synced) {
			t.Fatalf("seed %d: synced bytes changed", seed)
		}
		sawShort = sawShort || len(got) == len(synced)
		kept := make([]bool, len(got)/memPageSize+1)
		for p := int64(0); p*memPageSize < int64(len(got)); p++ {
			lo, hi := p*memPageSize, min((p+1)*memPageSize, int64(len(got)))
			newer, older := bytes.Equal(got[lo:hi], full[lo:hi]), true
			for i := max(lo, int64(len(synced))); i < hi; i++ {
				older = older && got[i] == 0
			}
			if !newer && !older {
				t.Fatalf("seed %d: page %d is neither its new nor its durable contents", seed, p)
			}
			kept[p] = newer && hi > int64(len(synced))
		}
		for p := 2; p < len(kept); p++ {
			sawHole = sawHole || (!kept[p-1] && kept[p])
		}
		c.Crash()
		if !bytes.Equal(readAll(t, c, "/f"), got) {
			t.Fatalf("seed %d: the outcome is not durable", seed)
		}
	}
	if !sawHole || !sawShort {
		t.Fatalf("outcomes not all seen: a later page without an earlier one %v, the durable size %v", sawHole, sawShort)
	}
}

func TestMemCrashWithIsDeterministic(t *testing.T) {
	run := func() []byte {
		fs := NewMem()
		var out []byte
		for _, name := range []string{"/x", "/y", "/z"} {
			f := mustOpen(t, fs, name, os.O_RDWR|os.O_CREATE)
			for i := range 20 {
				mustWrite(t, f, int64(i*50), bytes.Repeat([]byte{byte(i)}, 50))
			}
		}
		mustSyncDir(t, fs, "/")
		fs.CrashWith(rand.New(rand.NewPCG(42, 42)))
		for _, name := range []string{"/x", "/y", "/z"} {
			out = append(out, readAll(t, fs, name)...)
			out = append(out, '|')
		}
		return out
	}
	if a, b := run(), run(); !bytes.Equal(a, b) {
		t.Fatal("same seed, different torn crash")
	}
}

func TestMemCrashClone(t *testing.T) {
	fs := NewMem()
	f := mustOpen(t, fs, "/f", os.O_RDWR|os.O_CREATE)
	mustSyncDir(t, fs, "/")
	mustWrite(t, f, 0, bytes.Repeat([]byte{1}, 5000))
	mustSync(t, f)
	mustWrite(t, f, 5000, []byte("unsynced"))
	c := fs.CrashClone()
	if got := readAll(t, c, "/f"); len(got) != 5000 {
		t.Fatalf("clone has %d bytes", len(got))
	}
	// Old handle on the original still works and sees everything.
	if size, err := f.Size(); err != nil || size != 5008 {
		t.Fatalf("original after clone: %d %v", size, err)
	}
	// Writes on either side do not leak into the other (pages are shared
	// copy-on-write).
	mustWrite(t, f, 0, []byte{9})
	mustSync(t, f)
	cf := mustOpen(t, c, "/f", os.O_RDWR)
	mustWrite(t, cf, 1, []byte{8})
	if got := readAll(t, c, "/f"); got[0] != 1 || got[1] != 8 {
		t.Fatalf("clone sees %v", got[:2])
	}
	if got := readAll(t, fs, "/f"); got[0] != 9 || got[1] != 1 {
		t.Fatalf("original sees %v", got[:2])
	}
}

// TestMemRandomOpsAgainstModel drives random writes, truncates, syncs and
// crashes on one file and compares with a plain byte-slice model.
func TestMemRandomOpsAgainstModel(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	fs := NewMem()
	f := mustOpen(t, fs, "/f", os.O_RDWR|os.O_CREATE)
	mustSyncDir(t, fs, "/")
	var cur, durable []byte
	for step := range 3000 {
		switch op := rng.IntN(20); {
		case op < 12:
			off := rng.IntN(3 * memPageSize)
			p := make([]byte, rng.IntN(2*memPageSize)+1)
			for i := range p {
				p[i] = byte(rng.Uint32())
			}
			mustWrite(t, f, int64(off), p)
			if end := off + len(p); end > len(cur) {
				cur = append(cur, make([]byte, end-len(cur))...)
			}
			copy(cur[off:], p)
		case op < 15:
			size := rng.IntN(4 * memPageSize)
			if err := f.Truncate(int64(size)); err != nil {
				t.Fatal(err)
			}
			if size < len(cur) {
				cur = cur[:size]
			} else {
				cur = append(cur, make([]byte, size-len(cur))...)
			}
		case op < 18:
			mustSync(t, f)
			durable = slices.Clone(cur)
		case op < 19:
			c := fs.CrashClone()
			if got := readAll(t, c, "/f"); !bytes.Equal(got, durable) {
				t.Fatalf("step %d: clone differs from durable model", step)
			}
		default:
			fs.Crash()
			cur = slices.Clone(durable)
			f = mustOpen(t, fs, "/f", os.O_RDWR)
		}
		if got := readAll(t, fs, "/f"); !bytes.Equal(got, cur) {
			t.Fatalf("step %d: contents differ from model (len %d vs %d)", step, len(got), len(cur))
		}
	}
}

func TestMemDiskUsageAndModTime(t *testing.T) {
	fs := NewMem()
	fs.SetCapacity(10_000)
	now := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	fs.SetClock(func() time.Time { return now })
	f := mustOpen(t, fs, "/f", os.O_RDWR|os.O_CREATE)
	mustWrite(t, f, 0, make([]byte, 4000))
	total, free, err := fs.DiskUsage("/")
	if err != nil || total != 10_000 || free != 6000 {
		t.Fatalf("usage %d %d %v", total, free, err)
	}
	mustWrite(t, f, 0, make([]byte, 20_000))
	if _, free, _ := fs.DiskUsage("/"); free != 0 {
		t.Fatalf("free %d beyond capacity", free)
	}
	fi, err := fs.Stat("/f")
	if err != nil || !fi.ModTime().Equal(now) || fi.Size() != 20_000 || fi.Name() != "f" {
		t.Fatalf("stat %v %v", fi, err)
	}
	old := now.Add(-time.Hour)
	if err := fs.SetModTime("/f", old); err != nil {
		t.Fatal(err)
	}
	if fi, _ := fs.Stat("/f"); !fi.ModTime().Equal(old) {
		t.Fatal("SetModTime ignored")
	}
}

func TestMemConcurrentReadersWriterSyncer(t *testing.T) {
	fs := NewMem()
	f := mustOpen(t, fs, "/f", os.O_RDWR|os.O_CREATE)
	mustSyncDir(t, fs, "/")
	const chunk, chunks = 512, 400
	var wg sync.WaitGroup
	var written sync.Map // chunk index -> true once written
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range chunks {
			mustWrite(t, f, int64(i*chunk), bytes.Repeat([]byte{byte(i)}, chunk))
			written.Store(i, true)
			if i%16 == 0 {
				mustSync(t, f)
			}
		}
	}()
	for r := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, chunk)
			for i := r; i < chunks; i += 3 {
				for {
					if _, ok := written.Load(i); ok {
						break
					}
					_ = fs.SyncDir("/") // any op, to give the writer a turn
				}
				if _, err := f.ReadAt(buf, int64(i*chunk)); err != nil {
					t.Errorf("read chunk %d: %v", i, err)
					return
				}
				if buf[0] != byte(i) || buf[chunk-1] != byte(i) {
					t.Errorf("chunk %d torn: %d %d", i, buf[0], buf[chunk-1])
					return
				}
			}
		}()
	}
	wg.Wait()
	fs.Crash()
	if fi, err := fs.Stat("/f"); err != nil || fi.Size()%chunk != 0 {
		t.Fatalf("after crash: %v %v", fi, err)
	}
}

func ExampleMemFS_Crash() {
	fs := NewMem()
	f, _ := fs.OpenFile("/log", os.O_RDWR|os.O_CREATE, 0o644)
	_ = fs.SyncDir("/") // make the new entry durable
	f.WriteAt([]byte("acked"), 0)
	f.Sync()
	f.WriteAt([]byte(" not acked"), 5)
	fs.Crash()
	g, _ := fs.OpenFile("/log", os.O_RDONLY, 0)
	buf := make([]byte, 64)
	n, _ := g.ReadAt(buf, 0)
	fmt.Println(string(buf[:n]))
	// Output: acked
}
