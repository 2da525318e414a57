package index

import (
	"os"
	"sync/atomic"

	"github.com/keelmq/keel/internal/vfs"
)

// countFS wraps an FS and counts the WriteAt calls made on the files it
// opens. With noSync set, Sync does nothing (for benchmarks that measure the
// CPU cost of writes, not the disk).
type countFS struct {
	vfs.FS
	writes atomic.Int64
	bytes  atomic.Int64
	noSync bool
}

func (c *countFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := c.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &countFile{File: f, fs: c}, nil
}

type countFile struct {
	vfs.File
	fs *countFS
}

func (f *countFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.writes.Add(1)
	f.fs.bytes.Add(int64(len(p)))
	return f.File.WriteAt(p, off)
}

func (f *countFile) Sync() error {
	if f.fs.noSync {
		return nil
	}
	return f.File.Sync()
}

// hookFS wraps an FS and calls a hook before every WriteAt and Sync of the
// files it opens, with the operation's name ("write" or "sync").
type hookFS struct {
	vfs.FS
	hook atomic.Pointer[func(op string)]
}

func (h *hookFS) setHook(fn func(op string)) {
	if fn == nil {
		h.hook.Store(nil)
		return
	}
	h.hook.Store(&fn)
}

func (h *hookFS) call(op string) {
	if fn := h.hook.Load(); fn != nil {
		(*fn)(op)
	}
}

func (h *hookFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := h.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &hookFile{File: f, fs: h}, nil
}

type hookFile struct {
	vfs.File
	fs *hookFS
}

func (f *hookFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.call("write")
	return f.File.WriteAt(p, off)
}

func (f *hookFile) Sync() error {
	f.fs.call("sync")
	return f.File.Sync()
}
