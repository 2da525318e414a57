package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
	"golang.org/x/sys/unix"
)

// cachedPages counts the pages of path in the page cache (mincore of an
// untouched mapping).
func cachedPages(t *testing.T, path string) (cached, total int) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	for _, v := range vec {
		cached += int(v & 1)
	}
	return cached, len(vec)
}

// On a real disk a scrub pass verifies cold segments without leaving their
// pages in the page cache, and leaves the pages a consumer read cached.
func TestScrubberKeepsColdDataOutOfThePageCache(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
		t.Skip("the temporary directory is on tmpfs, whose pages are never released")
	}
	cfg := testConfig(vfs.OS{})
	cfg.Dir = dir
	cfg.CommitLogSegmentBytes = 1 << 20
	s := mustOpen(t, cfg)
	body := strings.Repeat("c", 4000)
	const n = 600 // about 2.4 MiB: three segments
	for i := range n {
		put(t, s, newMsg("T", 0, fmt.Sprintf("%04d%s", i, body), nil))
	}
	waitVisible(t, s, "T", 0, n)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	seg0 := filepath.Join(dir, commitLogDir, commitlog.SegmentName(0))
	seg1 := filepath.Join(dir, commitLogDir, commitlog.SegmentName(1<<20))
	for _, p := range []string{seg0, seg1} {
		f, err := vfs.OS{}.OpenFile(p, os.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.(vfs.CacheDropper).DropCache(0, 1<<20)
		f.Close()
		if c, _ := cachedPages(t, p); c != 0 {
			t.Skipf("%d pages of %s still cached after release: this filesystem keeps its cache", c, p)
		}
	}

	d := newScrubDriver(&cfg, 256<<10, time.Second) // reads of 256 KiB: read-ahead would run past each
	s = mustOpen(t, cfg)
	defer s.Close()
	// A consumer reads segment 1 (records of about 4 KiB: 1 MiB holds about
	// 250): hot.
	for off := int64(260); off < 500; {
		r, err := s.GetMessage("T", 0, off, int(min(32, 500-off)), 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range r.Records {
			if p := message.View(rec).PhysOffset(); p < 1<<20 || p >= 2<<20 {
				t.Fatalf("record at %d read, outside segment 1", p)
			}
		}
		off = min(r.NextOffset, 500)
		r.Release()
	}
	hot, total1 := cachedPages(t, seg1)
	if hot < total1/2 {
		t.Skipf("reads cached only %d of %d pages", hot, total1)
	}
	cold0, total0 := cachedPages(t, seg0)
	if cold0 > total0/8 {
		t.Skipf("%d of %d pages of the cold segment cached before scrubbing", cold0, total0)
	}
	d.tickUntil(t, 100, func() bool { return s.ScrubStatus().Passes >= 1 })
	if st := s.ScrubStatus(); st.Problems != 0 || st.Bytes < 2<<20 {
		t.Fatalf("scrub pass %+v: want all of the log read and no problem", st)
	}
	after0, _ := cachedPages(t, seg0)
	if after0 > cold0+total0/64 {
		t.Fatalf("the scrubber left %d pages of the cold segment cached (%d were before)", after0-cold0, cold0)
	}
	if after1, _ := cachedPages(t, seg1); after1 < hot-total1/64 {
		t.Fatalf("the scrubber released %d hot pages of %d", hot-after1, hot)
	}
}
