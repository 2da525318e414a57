package vfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Crash-safe small files. Their errors name the operation and the path;
// callers add their package prefix.

// MkdirAllDurable creates dir and any missing parents with perm, then syncs
// dir and every ancestor up to the root, so that after it returns nil the
// whole path survives a crash, including directories an earlier MkdirAll
// created without syncing them. It costs one SyncDir per path level: call
// it when creating a directory (e.g. after a Stat says it is missing), not
// on every write into it.
func MkdirAllDurable(fs FS, dir string, perm os.FileMode) error {
	if err := fs.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("create dir %s: %w", dir, err)
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if err := fs.SyncDir(d); err != nil {
			return fmt.Errorf("sync dir %s: %w", d, err)
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

// WriteFileDurable replaces path with data crash-safely: it writes
// path+".tmp" (created with perm, or truncated), fsyncs it, renames it over
// path and syncs the directory. After a crash path holds either its old
// content or data, never a mix; a leftover .tmp file is overwritten by the
// next call. The directory must exist (see MkdirAllDurable). Concurrent
// calls for the same path must be serialised by the caller.
func WriteFileDurable(fs FS, path string, data []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	f, err := fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	_, werr := f.WriteAt(data, 0)
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr != nil || cerr != nil {
		return fmt.Errorf("write %s: %w", tmp, errors.Join(werr, cerr))
	}
	if err := fs.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	dir := filepath.Dir(path)
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("sync dir %s: %w", dir, err)
	}
	return nil
}
