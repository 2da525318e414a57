//go:build unix

package store

import (
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// TestFilesOwnerOnly: everything the store creates on a real disk (root
// directory, CommitLog, ConsumeQueues, index, checkpoint, lock and marker
// files) is readable only by its owner, even under the permissive umask
// 022: the store asks for 0600 and 0700 itself rather than relying on the
// process umask.
func TestFilesOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)

	cfg := testConfig(vfs.OS{})
	cfg.Dir = filepath.Join(t.TempDir(), "data", "store")
	s := mustOpen(t, cfg)
	put(t, s, newMsg("T", 0, "body", map[string]string{message.PropKeys: "k1"}))
	waitVisible(t, s, "T", 0, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	checkOwnerOnly(t, filepath.Dir(cfg.Dir))
}

// checkOwnerOnly fails for every file or directory under root (root
// included) that grants any permission to group or others.
func checkOwnerOnly(t *testing.T, root string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
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
	if n < 6 {
		t.Fatalf("only %d entries under %s: the store wrote less than expected", n, root)
	}
}
