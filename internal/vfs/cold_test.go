package vfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// ReadCold keeps cached pages cached and releases the ones it brought in;
// UncachedRanges reports exactly the pages that are not cached.
func TestReadColdLeavesThePageCacheAsItWas(t *testing.T) {
	dir := t.TempDir()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	if st.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs, whose cached pages are the file's only copy and are never released")
	}
	path := filepath.Join(dir, "seg")
	f, err := OS{}.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 4 << 20
	data := bytes.Repeat([]byte("keel cold read  "), size/16)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.(CacheDropper).DropCache(0, size); err != nil {
		t.Fatal(err)
	}
	cold, err := f.(CacheProber).UncachedRanges(0, size)
	if err != nil {
		t.Fatal(err)
	}
	if len(cold) != 1 || cold[0] != (Range{0, size}) {
		t.Skipf("pages still cached after release (%v): this filesystem keeps its cache", cold)
	}
	// No read-ahead: it would bring pages in asynchronously, after they
	// were counted.
	if err := f.(ReadaheadDisabler).DisableReadahead(); err != nil {
		t.Fatal(err)
	}
	// A consumer reads the first MiB: hot.
	hot := make([]byte, 1<<20)
	if _, err := f.ReadAt(hot, 0); err != nil {
		t.Fatal(err)
	}
	page := os.Getpagesize()
	pages := size / page
	if got := residentPages(t, path, 1<<20); got < (1<<20)/page*3/4 {
		t.Skipf("only %d pages of a read are cached: this filesystem does not cache reads", got)
	}
	base := residentPages(t, path, size) - residentPages(t, path, 1<<20)
	if base > pages/2 {
		t.Skipf("read-ahead cached %d of %d pages", base, pages)
	}
	if cold, _ = f.(CacheProber).UncachedRanges(0, size); len(cold) == 0 || cold[0].Off < 1<<20 {
		t.Fatalf("uncached ranges %v after reading the first MiB", cold)
	}
	// The scrubber reads it all.
	back := make([]byte, size)
	if n, err := ReadCold(f, back, 0); n != size || err != nil || !bytes.Equal(back, data) {
		t.Fatalf("ReadCold: %d %v", n, err)
	}
	if got := residentPages(t, path, 1<<20); got < (1<<20)/page*3/4 {
		t.Fatalf("ReadCold released %d hot pages of %d", (1<<20)/page-got, (1<<20)/page)
	}
	if got := residentPages(t, path, size) - residentPages(t, path, 1<<20); got > base+pages/64 {
		t.Fatalf("%d pages ReadCold brought in stay cached (%d were before)", got-base, base)
	}
}

// A Garble rule makes a read return wrong bytes without an error, and
// leaves the file as it was.
func TestErrorFSGarbledRead(t *testing.T) {
	mem := NewMem()
	e := NewErrorFS(mem)
	f, err := e.OpenFile("/f", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	want := []byte("intact data")
	f.WriteAt(want, 0)
	e.Inject(Rule{Ops: OpRead | OpWrite, Path: "/f", Garble: true, Times: 1})
	if _, err := f.WriteAt(want, 0); err != nil {
		t.Fatalf("a Garble rule failed a write: %v", err)
	}
	got := make([]byte, len(want))
	if n, err := f.ReadAt(got, 0); n != len(want) || err != nil || bytes.Equal(got, want) {
		t.Fatalf("garbled read: %d %v %q", n, err, got)
	}
	if n, err := f.ReadAt(got, 0); n != len(want) || err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the read after: %d %v %q", n, err, got)
	}
	if e.Injected(OpRead) != 1 || e.Injected(OpWrite) != 0 {
		t.Fatalf("injected reads %d writes %d", e.Injected(OpRead), e.Injected(OpWrite))
	}
}
