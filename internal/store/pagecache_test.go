package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

// dropCountFS counts the page-cache releases of CommitLog segment files and
// passes them on to the files it wraps.
type dropCountFS struct {
	vfs.FS
	drops, bytes atomic.Int64
}

type dropCountFile struct {
	vfs.File
	fs *dropCountFS
}

func (fs *dropCountFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, "/commitlog/") {
		return f, err
	}
	return dropCountFile{f, fs}, nil
}

func (f dropCountFile) DropCache(off, n int64) error {
	f.fs.drops.Add(1)
	f.fs.bytes.Add(n)
	return f.File.(vfs.CacheDropper).DropCache(off, n)
}

// With a page-cache window the store releases the CommitLog's pages behind
// it on a real disk, and every message still reads back intact.
func TestPageCacheWindowReleasesOldPagesAndKeepsMessages(t *testing.T) {
	fs := &dropCountFS{FS: vfs.OS{}}
	cfg := testConfig(fs)
	cfg.Dir = filepath.Join(t.TempDir(), "store")
	cfg.CommitLogSegmentBytes = 1 << 20
	cfg.CommitLogCacheBytes = 1 << 20
	s := mustOpen(t, cfg)
	defer s.Close()

	const n = 4000 // about 16 MiB of 4 KiB messages
	body := strings.Repeat("k", 4000)
	for i := range n {
		put(t, s, newMsg("T", int32(i%2), fmt.Sprintf("%04d%s", i, body), nil))
	}
	waitVisible(t, s, "T", 0, n/2)
	waitVisible(t, s, "T", 1, n/2)
	deadline := time.Now().Add(10 * time.Second)
	// Releasing follows a chunk (8 MiB) behind the window: of the 16 MiB,
	// at least the first 7 MiB go.
	for fs.bytes.Load() < 7<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes released (%d calls), want at least 7 MiB of the 16 MiB written", fs.bytes.Load(), fs.drops.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if max := s.log.FlushedOffset() - cfg.CommitLogCacheBytes; fs.bytes.Load() > max {
		t.Fatalf("%d bytes released, more than the %d flushed behind the window", fs.bytes.Load(), max)
	}
	for q := range int32(2) {
		for off := int64(0); off < n/2; {
			r, err := s.GetMessage("T", q, off, 64, 1<<20, nil)
			if err != nil || r.Status != Found {
				t.Fatalf("queue %d offset %d: %v %v", q, off, r.Status, err)
			}
			for i, b := range bodies(r) {
				want := fmt.Sprintf("%04d%s", 2*(off+int64(i))+int64(q), body)
				if b != want {
					t.Fatalf("queue %d offset %d: body %.8q..., want %.8q...", q, off+int64(i), b, want)
				}
			}
			off = r.NextOffset
			r.Release()
		}
	}
}
