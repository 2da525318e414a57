package commitlog

import (
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// BenchmarkAppend is the CommitLog's write path without fdatasync: a batch
// of 16 records of 1 KiB (checked, patched, checksummed and written to
// the page cache) per operation, on the real disk.
//
//	go test -run '^$' -bench Append ./internal/store/commitlog/
func BenchmarkAppend(b *testing.B) {
	l, err := Open(Config{FS: vfs.OS{}, Dir: b.TempDir(), SegmentBytes: 256 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Recover(RecoverOptions{}); err != nil {
		b.Fatal(err)
	}
	batch := make([][]byte, 16)
	for i := range batch {
		batch[i] = rec(1024, byte(i))
	}
	b.SetBytes(16 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		if l.WrittenOffset() > 200<<20 {
			b.StopTimer()
			l.Close()
			if l, err = Open(Config{FS: vfs.OS{}, Dir: b.TempDir(), SegmentBytes: 256 << 20}); err != nil {
				b.Fatal(err)
			}
			if _, err := l.Recover(RecoverOptions{}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		if _, err := l.Append(batch, nil); err != nil {
			b.Fatal(err)
		}
	}
}
