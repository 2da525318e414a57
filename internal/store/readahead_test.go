package store

import (
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// readCountFS counts the bytes read from CommitLog segment files.
type readCountFS struct {
	vfs.FS
	bytes atomic.Int64
}

type readCountFile struct {
	vfs.File
	fs *readCountFS
}

func (fs *readCountFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := fs.FS.OpenFile(name, flag, perm)
	if err != nil || !strings.Contains(name, "/commitlog/") {
		return f, err
	}
	return readCountFile{f, fs}, nil
}

func (f readCountFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	f.fs.bytes.Add(int64(n))
	return n, err
}

// Without a filter a read fetches only the records it can return: a pull
// of one message does not read ahead the following ones.
func TestGetMessageReadsOnlyWhatItReturns(t *testing.T) {
	fs := &readCountFS{FS: vfs.NewMem()}
	cfg := fileReadConfig(fs)
	s := mustOpen(t, cfg)
	defer s.Close()
	body := strings.Repeat("x", 1000)
	for i := range 40 {
		put(t, s, newMsg("T", 0, fmt.Sprint(i, body), nil))
	}
	waitVisible(t, s, "T", 0, 40)
	size := int64(newMsg("T", 0, fmt.Sprint(0, body), nil).StoredSize())
	for _, tc := range []struct{ count, maxBytes, want int }{
		{1, 1 << 20, 1}, {5, 1 << 20, 5}, {32, 3 * int(size), 3}, {64, 1 << 20, 40},
	} {
		before := fs.bytes.Load()
		r, err := s.GetMessage("T", 0, 0, tc.count, tc.maxBytes, nil)
		if err != nil || len(r.Records) != tc.want {
			t.Fatalf("get %d: %d records, %v", tc.count, len(r.Records), err)
		}
		r.Release()
		// Every message of the first ten has a one-digit prefix.
		if read, max := fs.bytes.Load()-before, int64(tc.want)*(size+4+1); read > max {
			t.Fatalf("get %d (max %d bytes) read %d bytes for %d records", tc.count, tc.maxBytes, read, tc.want)
		}
	}
}
