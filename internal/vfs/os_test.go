package vfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// residentPages counts the pages of the first n bytes of path that are in
// the page cache (mincore of a mapping that is never touched, so mapping
// does not bring pages in).
func residentPages(t *testing.T, path string, n int) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (n+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	resident := 0
	for _, v := range vec {
		resident += int(v & 1)
	}
	return resident
}

func TestOSDropCacheReleasesCleanPagesAndKeepsContents(t *testing.T) {
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
	data := bytes.Repeat([]byte("keel page cache "), size/16)
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	pages := size / os.Getpagesize()
	if got := residentPages(t, path, size); got < pages/2 {
		t.Skipf("only %d of %d pages just written are cached: this filesystem does not cache writes", got, pages)
	}
	// Release the first half only.
	if err := f.(CacheDropper).DropCache(0, size/2); err != nil {
		t.Fatal(err)
	}
	if got := residentPages(t, path, size/2); got != 0 {
		t.Fatalf("%d pages of the released half still cached", got)
	}
	if got := residentPages(t, path, size) - residentPages(t, path, size/2); got < pages/4 {
		t.Fatalf("only %d pages of the half not released are cached", got)
	}
	back := make([]byte, size)
	if _, err := f.ReadAt(back, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Fatal("contents changed by releasing the page cache")
	}
	f.Close()
	if err := f.(CacheDropper).DropCache(0, size); err == nil {
		t.Fatal("DropCache of a closed file succeeded")
	}
}
