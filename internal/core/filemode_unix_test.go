//go:build unix

package core

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// TestMetadataFilesOwnerOnly: writeFileAtomic creates the config directory
// and the metadata file owner-only (0700, 0600) even under the permissive
// umask 022.
func TestMetadataFilesOwnerOnly(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)

	dir := filepath.Join(t.TempDir(), "config")
	path := filepath.Join(dir, "topics.json")
	if err := writeFileAtomic(vfs.OS{}, path, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, path} {
		info, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := info.Mode().Perm(); perm&0o077 != 0 {
			t.Errorf("%s has mode %v, want owner-only", p, perm)
		}
	}
}
