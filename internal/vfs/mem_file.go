package vfs

import (
	"io"
	"os"
	"sync/atomic"
	"syscall"
)

// memFile is a handle on a MemFS file.
type memFile struct {
	fs       *MemFS
	node     *memNode
	name     string
	gen      uint64
	readable bool
	writable bool
	closed   atomic.Bool
}

// check validates the handle for op. fs.mu must be held.
func (f *memFile) check(op string, write bool) error {
	switch {
	case f.closed.Load():
		return &os.PathError{Op: op, Path: f.name, Err: os.ErrClosed}
	case f.gen != f.fs.gen:
		return &os.PathError{Op: op, Path: f.name, Err: ErrCrashed}
	case write && !f.writable, !write && op == "read" && !f.readable:
		return &os.PathError{Op: op, Path: f.name, Err: syscall.EBADF}
	}
	return nil
}

func (f *memFile) ReadAt(p []byte, off int64) (int, error) {
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	if err := f.check("read", false); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "read", Path: f.name, Err: syscall.EINVAL}
	}
	n := f.node.read(p, off)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("write", true); err != nil {
		return 0, err
	}
	if off < 0 {
		return 0, &os.PathError{Op: "write", Path: f.name, Err: syscall.EINVAL}
	}
	if len(p) == 0 {
		return 0, nil
	}
	f.node.write(p, off)
	f.node.log = append(f.node.log, memOp{off: off, data: append([]byte(nil), p...)})
	f.node.modTime = f.fs.now()
	return len(p), nil
}

func (f *memFile) Truncate(size int64) error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("truncate", true); err != nil {
		return err
	}
	if size < 0 {
		return &os.PathError{Op: "truncate", Path: f.name, Err: syscall.EINVAL}
	}
	f.node.truncate(size)
	f.node.log = append(f.node.log, memOp{off: size, truncate: true})
	f.node.modTime = f.fs.now()
	return nil
}

func (f *memFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if err := f.check("fdatasync", false); err != nil {
		return err
	}
	f.node.sync()
	return nil
}

func (f *memFile) Size() (int64, error) {
	f.fs.mu.RLock()
	defer f.fs.mu.RUnlock()
	if err := f.check("stat", false); err != nil {
		return 0, err
	}
	return f.node.size, nil
}

func (f *memFile) Name() string { return f.name }

// Close releases the handle. Closing a handle invalidated by a crash
// succeeds, so cleanup paths stay quiet.
func (f *memFile) Close() error {
	if f.closed.Swap(true) {
		return &os.PathError{Op: "close", Path: f.name, Err: os.ErrClosed}
	}
	return nil
}

// read copies the current contents at off into p and returns the count.
func (n *memNode) read(p []byte, off int64) int {
	if off >= n.size {
		return 0
	}
	if rem := n.size - off; int64(len(p)) > rem {
		p = p[:rem]
	}
	done := 0
	for done < len(p) {
		idx, po := off/memPageSize, off%memPageSize
		var c int
		if pg := n.pages[idx]; pg != nil {
			c = copy(p[done:], pg[po:])
		} else {
			c = min(len(p)-done, memPageSize-int(po))
			clear(p[done : done+c])
		}
		done += c
		off += int64(c)
	}
	return done
}

// ownPage returns page idx of the current state, private to it.
func (n *memNode) ownPage(idx int64) *memPage {
	pg := n.pages[idx]
	if _, dirty := n.dirty[idx]; dirty && pg != nil {
		return pg
	}
	np := new(memPage)
	if pg != nil {
		*np = *pg
	}
	n.pages[idx] = np
	n.dirty[idx] = struct{}{}
	return np
}

// write changes the current contents; len(p) must be > 0.
func (n *memNode) write(p []byte, off int64) {
	for len(p) > 0 {
		idx, po := off/memPageSize, off%memPageSize
		c := copy(n.ownPage(idx)[po:], p)
		p = p[c:]
		off += int64(c)
	}
	n.size = max(n.size, off)
}

// truncate changes the current size. Bytes past the size are kept zero so
// that growing the file again reads zeros.
func (n *memNode) truncate(size int64) {
	if size < n.size {
		first := size / memPageSize
		if po := size % memPageSize; po != 0 {
			if n.pages[first] != nil {
				clear(n.ownPage(first)[po:])
			}
			first++
		}
		for idx := range n.pages {
			if idx >= first {
				delete(n.pages, idx)
				n.dirty[idx] = struct{}{}
			}
		}
	}
	n.size = size
}

// sync makes the current contents durable.
func (n *memNode) sync() {
	for idx := range n.dirty {
		if pg, ok := n.pages[idx]; ok {
			n.syncedPages[idx] = pg
		} else {
			delete(n.syncedPages, idx)
		}
	}
	clear(n.dirty)
	n.syncedSize = n.size
	n.log = nil
}
