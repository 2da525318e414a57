//go:build unix

package schedule

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// TestCursorFileOwnerOnly: the cursor directory and file are created
// owner-only (0700, 0600) even under the permissive umask 022.
func TestCursorFileOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)

	dir := filepath.Join(t.TempDir(), "store")
	if err := ensureCursorDir(vfs.OS{}, dir); err != nil {
		t.Fatal(err)
	}
	if err := saveCursors(vfs.OS{}, dir, map[qkey]int64{{topic: LevelTopic, id: 0}: 7}); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n++
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v, want owner-only", path, perm)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 { // store, store/config, the cursor file
		t.Fatalf("%d entries under %s, want 3", n, dir)
	}
}
