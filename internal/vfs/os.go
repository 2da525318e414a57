package vfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// OS is the real filesystem.
type OS struct{}

var _ FS = OS{}

type osFile struct{ *os.File }

func (f osFile) Sync() error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if err != unix.EINTR {
			if err != nil {
				return &os.PathError{Op: "fdatasync", Path: f.File.Name(), Err: err}
			}
			return nil
		}
	}
}

// DropCache implements CacheDropper. The descriptor is held for the call
// (SyscallConn), so a concurrent Close cannot hand it to another file.
func (f osFile) DropCache(off, n int64) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var adv error
	if err := rc.Control(func(fd uintptr) {
		adv = unix.Fadvise(int(fd), off, n, unix.FADV_DONTNEED)
	}); err != nil {
		return err
	}
	if adv != nil {
		return &os.PathError{Op: "fadvise", Path: f.File.Name(), Err: adv}
	}
	return nil
}

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// OpenFile implements FS.
func (OS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag&os.O_APPEND != 0 {
		return nil, fmt.Errorf("vfs: open %s: O_APPEND is not supported", name)
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// Remove implements FS.
func (OS) Remove(name string) error { return os.Remove(name) }

// Rename implements FS.
func (OS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// MkdirAll implements FS.
func (OS) MkdirAll(dir string, perm os.FileMode) error { return os.MkdirAll(dir, perm) }

// Stat implements FS.
func (OS) Stat(name string) (os.FileInfo, error) { return os.Stat(name) }

// List implements FS.
func (OS) List(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	sort.Strings(names)
	return names, nil
}

// SyncDir implements FS.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("vfs: sync dir %s: %w", dir, err)
	}
	return nil
}

type osLock struct{ f *os.File }

func (l osLock) Close() error {
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	return l.f.Close()
}

// Lock implements FS with flock(2). A second process (or a second Lock in
// the same process) fails at once instead of waiting.
func (OS) Lock(name string) (io.Closer, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("vfs: lock %s (is another keel using this data dir?): %w", name, err)
	}
	return osLock{f}, nil
}

// DiskUsage implements FS with statfs(2).
func (OS) DiskUsage(path string) (uint64, uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Clean(path), &st); err != nil {
		return 0, 0, fmt.Errorf("vfs: statfs %s: %w", path, err)
	}
	bs := uint64(st.Bsize)
	return st.Blocks * bs, st.Bavail * bs, nil
}
