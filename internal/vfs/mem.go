package vfs

import (
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrCrashed is returned by every operation on a MemFS file handle that was
// opened before a simulated crash.
var ErrCrashed = errors.New("vfs: file handle invalidated by a simulated crash")

const (
	memPageSize = 4096
	// DefaultMemCapacity is the total size a MemFS reports by default.
	DefaultMemCapacity = 1 << 40
)

type memPage [memPageSize]byte

// memOp is one unsynced change of a file, kept in order so that a torn crash
// can replay a prefix of them. A truncate op has data == nil and the new size
// in off.
type memOp struct {
	off      int64
	data     []byte
	truncate bool
}

// memNode is a file or a directory. Each node holds its current state (what
// a reader sees) and its durable state (what survives a crash).
//
// Pages are shared copy-on-write between the two states: a page whose index
// is in dirty and that is present in pages belongs to the current state alone
// and may be changed in place; any other page is shared and is cloned before
// a write.
type memNode struct {
	isDir   bool
	modTime time.Time

	// Directory: entries now and as of the last SyncDir.
	children       map[string]*memNode
	syncedChildren map[string]*memNode

	// File: contents now and as of the last completed Sync.
	size        int64
	pages       map[int64]*memPage
	dirty       map[int64]struct{}
	syncedSize  int64
	syncedPages map[int64]*memPage
	log         []memOp // unsynced changes, in order
}

func newMemDir(now time.Time) *memNode {
	return &memNode{
		isDir:          true,
		modTime:        now,
		children:       map[string]*memNode{},
		syncedChildren: map[string]*memNode{},
	}
}

func newMemFile(now time.Time) *memNode {
	return &memNode{
		modTime:     now,
		pages:       map[int64]*memPage{},
		dirty:       map[int64]struct{}{},
		syncedPages: map[int64]*memPage{},
	}
}

// MemFS is an in-memory FS with strict crash semantics, for tests.
//
// A file's contents become durable only through a completed File.Sync; the
// creation, rename or removal of a directory entry (files and directories
// alike, including those made by MkdirAll) becomes durable only through a
// SyncDir of the parent directory. Crash and CrashWith simulate a power loss:
// the filesystem reverts in place to its durable state and every handle
// opened before returns ErrCrashed. CrashClone and CrashCloneWith leave the
// filesystem alone and return a copy holding what a crash would have left.
//
// A rename across two directories is durable in each directory separately,
// so a crash between the two SyncDir calls can leave the file under both
// names (sharing one node) or under neither; keep renames within one
// directory.
//
// MemFS never runs out of space (wrap it in an ErrorFS for that); DiskUsage
// reports the capacity set by SetCapacity minus the bytes of all files.
//
// MemFS is safe for concurrent use. One RWMutex guards everything: reads
// share it, writes take it exclusively.
type MemFS struct {
	mu       sync.RWMutex
	root     *memNode
	gen      uint64 // incremented by every crash
	capacity uint64
	locks    map[string]bool
	now      func() time.Time
}

var _ FS = (*MemFS)(nil)

// NewMem returns an empty MemFS.
func NewMem() *MemFS {
	return &MemFS{
		root:     newMemDir(time.Now()),
		capacity: DefaultMemCapacity,
		locks:    map[string]bool{},
		now:      time.Now,
	}
}

// SetCapacity sets the total size reported by DiskUsage.
func (fs *MemFS) SetCapacity(totalBytes uint64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.capacity = totalBytes
}

// SetClock sets the clock used for modification times.
func (fs *MemFS) SetClock(now func() time.Time) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.now = now
}

// SetModTime sets the modification time of name (like touch -d).
func (fs *MemFS) SetModTime(name string, t time.Time) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookup(name)
	if err != nil {
		return &os.PathError{Op: "chtimes", Path: name, Err: err}
	}
	n.modTime = t
	return nil
}

func splitPath(name string) []string {
	c := filepath.Clean("/" + name)
	if c == "/" {
		return nil
	}
	return strings.Split(c[1:], "/")
}

// lookup follows the current directory entries. fs.mu must be held.
func (fs *MemFS) lookup(name string) (*memNode, error) {
	n := fs.root
	for _, p := range splitPath(name) {
		if !n.isDir {
			return nil, syscall.ENOTDIR
		}
		c, ok := n.children[p]
		if !ok {
			return nil, syscall.ENOENT
		}
		n = c
	}
	return n, nil
}

// lookupParent returns the directory holding name and name's base. fs.mu
// must be held.
func (fs *MemFS) lookupParent(name string) (*memNode, string, error) {
	parts := splitPath(name)
	if len(parts) == 0 {
		return nil, "", syscall.EINVAL
	}
	dir, err := fs.lookup(strings.Join(parts[:len(parts)-1], "/"))
	if err != nil {
		return nil, "", err
	}
	if !dir.isDir {
		return nil, "", syscall.ENOTDIR
	}
	return dir, parts[len(parts)-1], nil
}

// OpenFile implements FS.
func (fs *MemFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if flag&os.O_APPEND != 0 {
		return nil, &os.PathError{Op: "open", Path: name, Err: errors.New("vfs: O_APPEND is not supported")}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.lookupParent(name)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	n, ok := dir.children[base]
	switch {
	case ok && flag&(os.O_CREATE|os.O_EXCL) == os.O_CREATE|os.O_EXCL:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EEXIST}
	case ok && n.isDir:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.EISDIR}
	case !ok && flag&os.O_CREATE == 0:
		return nil, &os.PathError{Op: "open", Path: name, Err: syscall.ENOENT}
	case !ok:
		n = newMemFile(fs.now())
		dir.children[base] = n
		dir.modTime = fs.now()
	}
	f := &memFile{fs: fs, node: n, name: name, gen: fs.gen}
	switch flag & (os.O_RDONLY | os.O_WRONLY | os.O_RDWR) {
	case os.O_RDONLY:
		f.readable = true
	case os.O_WRONLY:
		f.writable = true
	default:
		f.readable, f.writable = true, true
	}
	if flag&os.O_TRUNC != 0 && f.writable && n.size != 0 {
		n.truncate(0)
		n.log = append(n.log, memOp{off: 0, truncate: true})
		n.modTime = fs.now()
	}
	return f, nil
}

// Remove implements FS.
func (fs *MemFS) Remove(name string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	dir, base, err := fs.lookupParent(name)
	if err != nil {
		return &os.PathError{Op: "remove", Path: name, Err: err}
	}
	n, ok := dir.children[base]
	if !ok {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOENT}
	}
	if n.isDir && len(n.children) > 0 {
		return &os.PathError{Op: "remove", Path: name, Err: syscall.ENOTEMPTY}
	}
	delete(dir.children, base)
	dir.modTime = fs.now()
	return nil
}

// Rename implements FS. Replacing a directory is not supported.
func (fs *MemFS) Rename(oldname, newname string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	odir, obase, err := fs.lookupParent(oldname)
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	n, ok := odir.children[obase]
	if !ok {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.ENOENT}
	}
	ndir, nbase, err := fs.lookupParent(newname)
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	if old, ok := ndir.children[nbase]; ok {
		if old == n {
			return nil
		}
		if old.isDir {
			return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: syscall.EISDIR}
		}
	}
	delete(odir.children, obase)
	ndir.children[nbase] = n
	odir.modTime, ndir.modTime = fs.now(), fs.now()
	return nil
}

// MkdirAll implements FS. New directories are durable only after SyncDir of
// their parents.
func (fs *MemFS) MkdirAll(dir string, perm os.FileMode) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n := fs.root
	for _, p := range splitPath(dir) {
		c, ok := n.children[p]
		if !ok {
			c = newMemDir(fs.now())
			n.children[p] = c
			n.modTime = fs.now()
		}
		if !c.isDir {
			return &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
		}
		n = c
	}
	return nil
}

// List implements FS.
func (fs *MemFS) List(dir string) ([]string, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	n, err := fs.lookup(dir)
	if err == nil && !n.isDir {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return nil, &os.PathError{Op: "readdir", Path: dir, Err: err}
	}
	return slices.Sorted(maps.Keys(n.children)), nil
}

// Stat implements FS.
func (fs *MemFS) Stat(name string) (os.FileInfo, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	n, err := fs.lookup(name)
	if err != nil {
		return nil, &os.PathError{Op: "stat", Path: name, Err: err}
	}
	return memFileInfo{name: filepath.Base(filepath.Clean("/" + name)), size: n.size, dir: n.isDir, mod: n.modTime}, nil
}

// SyncDir implements FS: it makes the current entries of dir durable.
func (fs *MemFS) SyncDir(dir string) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, err := fs.lookup(dir)
	if err == nil && !n.isDir {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return &os.PathError{Op: "syncdir", Path: dir, Err: err}
	}
	n.syncedChildren = maps.Clone(n.children)
	return nil
}

// Lock implements FS. The lock is held by the process, so a crash releases
// it.
func (fs *MemFS) Lock(name string) (io.Closer, error) {
	f, err := fs.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	_ = f.Close()
	key := filepath.Clean("/" + name)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.locks[key] {
		return nil, &os.PathError{Op: "lock", Path: name, Err: syscall.EWOULDBLOCK}
	}
	fs.locks[key] = true
	return &memLock{fs: fs, key: key, gen: fs.gen}, nil
}

type memLock struct {
	fs   *MemFS
	key  string
	gen  uint64
	once sync.Once
}

func (l *memLock) Close() error {
	l.once.Do(func() {
		l.fs.mu.Lock()
		defer l.fs.mu.Unlock()
		if l.gen == l.fs.gen {
			delete(l.fs.locks, l.key)
		}
	})
	return nil
}

// DiskUsage implements FS.
func (fs *MemFS) DiskUsage(path string) (uint64, uint64, error) {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	if _, err := fs.lookup(path); err != nil {
		return 0, 0, &os.PathError{Op: "statfs", Path: path, Err: err}
	}
	used := uint64(fs.root.usedBytes())
	if used >= fs.capacity {
		return fs.capacity, 0, nil
	}
	return fs.capacity, fs.capacity - used, nil
}

func (n *memNode) usedBytes() int64 {
	if !n.isDir {
		return n.size
	}
	var sum int64
	for _, c := range n.children {
		sum += c.usedBytes()
	}
	return sum
}

type memFileInfo struct {
	name string
	size int64
	dir  bool
	mod  time.Time
}

func (fi memFileInfo) Name() string       { return fi.name }
func (fi memFileInfo) Size() int64        { return fi.size }
func (fi memFileInfo) ModTime() time.Time { return fi.mod }
func (fi memFileInfo) IsDir() bool        { return fi.dir }
func (fi memFileInfo) Sys() any           { return nil }
func (fi memFileInfo) Mode() os.FileMode {
	if fi.dir {
		return os.ModeDir | 0o755
	}
	return 0o644
}
