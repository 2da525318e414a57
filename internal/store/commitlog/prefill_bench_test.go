package commitlog

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// BenchmarkSyncedWrite is what prefill is for: a 1,100-byte write (about
// a 1 KiB message) followed by fdatasync, on the real disk under the test's
// temporary directory (set TMPDIR to measure another disk), appending to a
// growing file versus overwriting zeros already written and synced.
//
//	go test -run '^$' -bench SyncedWrite ./internal/store/commitlog/
func BenchmarkSyncedWrite(b *testing.B) {
	for _, prefilled := range []bool{false, true} {
		name := "append"
		if prefilled {
			name = "overwrite-prefilled"
		}
		b.Run(name, func(b *testing.B) {
			const size = 1100
			f, err := vfs.OS{}.OpenFile(filepath.Join(b.TempDir(), "seg"), os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			if prefilled {
				zeros := make([]byte, 1<<20)
				for off := int64(0); off < int64(b.N)*size+int64(len(zeros)); off += int64(len(zeros)) {
					if _, err := f.WriteAt(zeros, off); err != nil {
						b.Fatal(err)
					}
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			rec := make([]byte, size)
			for i := range rec {
				rec[i] = byte(i)
			}
			b.SetBytes(size)
			b.ResetTimer()
			for i := range b.N {
				if _, err := f.WriteAt(rec, int64(i)*size); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
