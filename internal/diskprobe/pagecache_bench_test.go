package diskprobe

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkBufferedWrite separates the two costs of a buffered write that
// Keel's CommitLog writer pays: copying into the page cache, and giving the
// file new pages. new-pages appends to a file that grows (every page is
// allocated by the write, as for a CommitLog segment being filled);
// cached-pages overwrites a 256 MiB file whose pages are cached already;
// released-pages appends like new-pages but releases the page cache more
// than 256 MiB behind the end (written back first), as the CommitLog does
// with commitLogPageCacheBytes, so new pages reuse released memory. On a
// virtual machine whose memory the host backs on first touch, new-pages
// also pays for that (docs/performance.md).
func BenchmarkBufferedWrite(b *testing.B) {
	const chunk = 256 << 10
	const cachedBytes = 256 << 20
	buf := make([]byte, chunk)
	fillPattern(buf)
	open := func(b *testing.B) *os.File {
		f, err := os.Create(filepath.Join(b.TempDir(), "probe"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return f
	}
	write := func(b *testing.B, f *os.File, off int64) {
		if _, err := f.WriteAt(buf, off); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("new-pages", func(b *testing.B) {
		f := open(b)
		b.SetBytes(chunk)
		for i := range b.N {
			write(b, f, int64(i)*chunk)
		}
	})
	b.Run("released-pages", func(b *testing.B) {
		const step = 64 << 20 // write back and release in steps of this size
		f := open(b)
		fd := int(f.Fd())
		b.SetBytes(chunk)
		for i := range b.N {
			off := int64(i) * chunk
			write(b, f, off)
			if end := off + chunk; end%step == 0 {
				if err := unix.SyncFileRange(fd, end-step, step, unix.SYNC_FILE_RANGE_WRITE); err != nil {
					b.Fatal(err)
				}
				if old := end - cachedBytes - step; old >= 0 {
					if err := unix.SyncFileRange(fd, old, step, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER); err != nil {
						b.Fatal(err)
					}
					if err := unix.Fadvise(fd, old, step, unix.FADV_DONTNEED); err != nil {
						b.Fatal(err)
					}
				}
			}
		}
	})
	b.Run("cached-pages", func(b *testing.B) {
		f := open(b)
		for off := int64(0); off < cachedBytes; off += chunk {
			write(b, f, off)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		b.SetBytes(chunk)
		b.ResetTimer()
		for i := range b.N {
			write(b, f, int64(i)*chunk%cachedBytes)
		}
	})
}
