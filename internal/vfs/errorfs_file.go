package vfs

import (
	"os"
	"syscall"
)

// SetFreeBytes gives the filesystem n free bytes: a write or truncate that
// would grow the total size of the files past the budget fails whole with
// an *os.PathError wrapping syscall.ENOSPC, and shrinking or removing files
// gives bytes back. Growth is counted in file size, not blocks, and holes
// count as used. n < 0 removes the limit.
func (e *ErrorFS) SetFreeBytes(n int64) {
	e.spaceMu.Lock()
	defer e.spaceMu.Unlock()
	e.freeBytes = n
}

// FreeBytes returns the remaining budget, or -1 when unlimited.
func (e *ErrorFS) FreeBytes() int64 {
	e.spaceMu.Lock()
	defer e.spaceMu.Unlock()
	return e.freeBytes
}

func (e *ErrorFS) release(n int64) {
	if n <= 0 {
		return
	}
	e.spaceMu.Lock()
	defer e.spaceMu.Unlock()
	if e.freeBytes >= 0 {
		e.freeBytes += n
	}
}

// resize runs do, a change of f that leaves it newSize bytes long (or longer
// if it already was, when grow is true), charging the growth against the
// budget. The budget lock is held across do so that concurrent writers
// cannot overdraw it.
func (e *ErrorFS) resize(f File, op string, newSize int64, grow bool, do func() error) error {
	e.spaceMu.Lock()
	defer e.spaceMu.Unlock()
	if e.freeBytes < 0 {
		return do()
	}
	size, err := f.Size()
	if err != nil {
		return err
	}
	if grow && newSize < size {
		newSize = size
	}
	if delta := newSize - size; delta > e.freeBytes {
		e.noSpace.Add(1)
		return &os.PathError{Op: op, Path: f.Name(), Err: syscall.ENOSPC}
	}
	if err := do(); err != nil {
		return err
	}
	e.freeBytes -= newSize - size
	return nil
}

// errorFile is a File of an ErrorFS.
type errorFile struct {
	inner File
	fs    *ErrorFS
}

func (f *errorFile) ReadAt(p []byte, off int64) (int, error) {
	_, err := f.fs.check(OpRead, f.inner.Name())
	if err == errGarble {
		n, err := f.inner.ReadAt(p, off)
		for i := range p[:n] {
			p[i] = ^p[i]
		}
		return n, err
	}
	if err != nil {
		return 0, &os.PathError{Op: "read", Path: f.inner.Name(), Err: err}
	}
	return f.inner.ReadAt(p, off)
}

func (f *errorFile) WriteAt(p []byte, off int64) (int, error) {
	short, injected := f.fs.check(OpWrite, f.inner.Name())
	if injected != nil {
		short = min(max(short, 0), len(p))
		p = p[:short]
	}
	var n int
	err := f.fs.resize(f.inner, "write", off+int64(len(p)), true, func() (err error) {
		n, err = f.inner.WriteAt(p, off)
		return err
	})
	if err == nil && injected != nil {
		err = &os.PathError{Op: "write", Path: f.inner.Name(), Err: injected}
	}
	return n, err
}

func (f *errorFile) Truncate(size int64) error {
	if _, err := f.fs.check(OpTruncate, f.inner.Name()); err != nil {
		return &os.PathError{Op: "truncate", Path: f.inner.Name(), Err: err}
	}
	return f.fs.resize(f.inner, "truncate", size, false, func() error {
		return f.inner.Truncate(size)
	})
}

func (f *errorFile) Sync() error {
	if _, err := f.fs.check(OpSync, f.inner.Name()); err != nil {
		return &os.PathError{Op: "fdatasync", Path: f.inner.Name(), Err: err}
	}
	return f.inner.Sync()
}

// DropCache forwards to the wrapped file if it can drop its cache.
func (f *errorFile) DropCache(off, n int64) error {
	if d, ok := f.inner.(CacheDropper); ok {
		return d.DropCache(off, n)
	}
	return nil
}

// DisableReadahead forwards to the wrapped file if it can.
func (f *errorFile) DisableReadahead() error {
	if d, ok := f.inner.(ReadaheadDisabler); ok {
		return d.DisableReadahead()
	}
	return nil
}

// UncachedRanges forwards to the wrapped file if it can probe its cache
// (else it reports nothing cached, so a cold reader releases what it read).
func (f *errorFile) UncachedRanges(off, n int64) ([]Range, error) {
	if p, ok := f.inner.(CacheProber); ok {
		return p.UncachedRanges(off, n)
	}
	return []Range{{off, n}}, nil
}

func (f *errorFile) Close() error         { return f.inner.Close() }
func (f *errorFile) Size() (int64, error) { return f.inner.Size() }
func (f *errorFile) Name() string         { return f.inner.Name() }
