package diskprobe

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkBufferedWrite separates the two costs of a buffered write that
// Keel's CommitLog writer pays: copying into the page cache, and giving the
// file new pages. new-pages appends to a file that grows (every page is
// allocated by the write, as for a CommitLog segment being filled);
// cached-pages overwrites a 256 MiB file whose pages are cached already. On
// a virtual machine whose memory the host backs on first touch, new-pages
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
