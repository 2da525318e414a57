package vfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// ErrInjected is wrapped by every fault an ErrorFS rule injects, next to the
// rule's error (syscall.EIO by default).
var ErrInjected = errors.New("vfs: injected fault")

// errGarble tells a read that a Garble rule matched (never returned).
var errGarble = errors.New("vfs: garble the read")

// Op is a set of filesystem operations an ErrorFS rule applies to.
type Op uint16

// Operations that can fail on purpose.
const (
	OpOpen Op = 1 << iota
	OpRead
	OpWrite
	OpSync
	OpTruncate
	OpRename
	OpRemove
	OpSyncDir
	OpMkdir
	OpAll Op = 1<<iota - 1
)

const numOps = 9

var opNames = [numOps]string{"open", "read", "write", "fdatasync", "truncate", "rename", "remove", "syncdir", "mkdir"}

func (o Op) String() string {
	var parts []string
	for i, name := range opNames {
		if o&(1<<i) != 0 {
			parts = append(parts, name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Rule selects calls to fail. A call matches when its operation is in Ops
// and its path contains Path (for a rename: either path). The first Skip
// matching calls pass; after them the rule fires on every matching call, or
// on Times calls at most when Times > 0.
type Rule struct {
	Ops   Op
	Path  string
	Skip  int
	Times int
	// Err is the cause of the failure (default syscall.EIO). The returned
	// error is an *os.PathError (an *os.LinkError for rename) wrapping both
	// Err and ErrInjected.
	Err error
	// ShortWrite is for OpWrite: how many bytes of the write reach the inner
	// file before the error (a torn write).
	ShortWrite int
	// Stall, if not nil, makes a matching call wait until it is closed and
	// then go ahead without an error (a stuck disk); Err and ShortWrite are
	// ignored. Injected counts the calls it held.
	Stall <-chan struct{}
	// Garble is for OpRead: a matching read succeeds but returns its bytes
	// inverted (a read fault: the file is unchanged, a later read may be
	// right). Err is ignored; the rule never matches other operations.
	Garble bool
}

// RuleID names an injected rule for RemoveRule.
type RuleID uint64

type rule struct {
	Rule
	id      RuleID
	matched int
	fired   int
}

// ErrorFS wraps an FS and fails chosen operations: by rule (see Rule) or,
// after SetFreeBytes, by running out of space. A failed Sync does not reach
// the inner file, so the data it should have made durable is not. ErrorFS is
// safe for concurrent use.
type ErrorFS struct {
	inner FS

	mu     sync.Mutex // guards rules, nextID
	rules  []*rule
	nextID RuleID

	counts    [numOps]atomic.Uint64
	noSpace   atomic.Uint64
	spaceMu   sync.Mutex // guards freeBytes; held across growing writes
	freeBytes int64      // < 0: unlimited
}

var _ FS = (*ErrorFS)(nil)

// NewErrorFS wraps inner. It injects nothing until told to.
func NewErrorFS(inner FS) *ErrorFS {
	return &ErrorFS{inner: inner, freeBytes: -1}
}

// Inner returns the wrapped filesystem.
func (e *ErrorFS) Inner() FS { return e.inner }

// Inject adds a rule and returns its id.
func (e *ErrorFS) Inject(r Rule) RuleID {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID++
	e.rules = append(e.rules, &rule{Rule: r, id: e.nextID})
	return e.nextID
}

// InjectWriteError fails every write to a path containing path.
func (e *ErrorFS) InjectWriteError(path string) RuleID {
	return e.Inject(Rule{Ops: OpWrite, Path: path})
}

// InjectSyncError fails every fdatasync of a path containing path.
func (e *ErrorFS) InjectSyncError(path string) RuleID {
	return e.Inject(Rule{Ops: OpSync, Path: path})
}

// InjectOnce fails the next matching call only.
func (e *ErrorFS) InjectOnce(ops Op, path string) RuleID {
	return e.Inject(Rule{Ops: ops, Path: path, Times: 1})
}

// InjectNth fails the n-th matching call (1-based) only.
func (e *ErrorFS) InjectNth(ops Op, path string, n int) RuleID {
	return e.Inject(Rule{Ops: ops, Path: path, Skip: n - 1, Times: 1})
}

// RemoveRule removes a rule; it reports whether the rule existed.
func (e *ErrorFS) RemoveRule(id RuleID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, r := range e.rules {
		if r.id == id {
			e.rules = append(e.rules[:i], e.rules[i+1:]...)
			return true
		}
	}
	return false
}

// ClearRules removes every rule (SetFreeBytes is separate).
func (e *ErrorFS) ClearRules() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.rules = nil
}

// Injected returns how many faults rules have injected into the operations
// in ops.
func (e *ErrorFS) Injected(ops Op) uint64 {
	var n uint64
	for i := range e.counts {
		if ops&(1<<i) != 0 {
			n += e.counts[i].Load()
		}
	}
	return n
}

// NoSpaceErrors returns how many calls failed with ENOSPC.
func (e *ErrorFS) NoSpaceErrors() uint64 { return e.noSpace.Load() }

// check runs the rules for one call and returns the injected error, if any,
// with the rule's ShortWrite. A stalling rule makes it wait instead.
func (e *ErrorFS) check(op Op, paths ...string) (short int, err error) {
	short, stall, err := e.match(op, paths)
	if stall != nil {
		<-stall
	}
	return short, err
}

func (e *ErrorFS) match(op Op, paths []string) (short int, stall <-chan struct{}, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.rules {
		if r.Ops&op == 0 || !matchesAny(r.Path, paths) || (r.Garble && op != OpRead) {
			continue
		}
		r.matched++
		if r.matched <= r.Skip || (r.Times > 0 && r.fired >= r.Times) {
			continue
		}
		r.fired++
		for i := range opNames {
			if op == 1<<i {
				e.counts[i].Add(1)
			}
		}
		if r.Stall != nil {
			return 0, r.Stall, nil
		}
		if r.Garble {
			return 0, nil, errGarble
		}
		cause := r.Err
		if cause == nil {
			cause = syscall.EIO
		}
		return r.ShortWrite, nil, fmt.Errorf("%w (%w)", cause, ErrInjected)
	}
	return 0, nil, nil
}

func matchesAny(sub string, paths []string) bool {
	for _, p := range paths {
		if strings.Contains(p, sub) {
			return true
		}
	}
	return false
}

// OpenFile implements FS.
func (e *ErrorFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	if _, err := e.check(OpOpen, name); err != nil {
		return nil, &os.PathError{Op: "open", Path: name, Err: err}
	}
	f, err := e.inner.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &errorFile{inner: f, fs: e}, nil
}

// Remove implements FS.
func (e *ErrorFS) Remove(name string) error {
	if _, err := e.check(OpRemove, name); err != nil {
		return &os.PathError{Op: "remove", Path: name, Err: err}
	}
	size := e.sizeOf(name)
	if err := e.inner.Remove(name); err != nil {
		return err
	}
	e.release(size)
	return nil
}

// Rename implements FS.
func (e *ErrorFS) Rename(oldname, newname string) error {
	if _, err := e.check(OpRename, oldname, newname); err != nil {
		return &os.LinkError{Op: "rename", Old: oldname, New: newname, Err: err}
	}
	replaced := e.sizeOf(newname)
	if err := e.inner.Rename(oldname, newname); err != nil {
		return err
	}
	e.release(replaced)
	return nil
}

// MkdirAll implements FS.
func (e *ErrorFS) MkdirAll(dir string, perm os.FileMode) error {
	if _, err := e.check(OpMkdir, dir); err != nil {
		return &os.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	return e.inner.MkdirAll(dir, perm)
}

// List implements FS.
func (e *ErrorFS) List(dir string) ([]string, error) { return e.inner.List(dir) }

// Stat implements FS.
func (e *ErrorFS) Stat(name string) (os.FileInfo, error) { return e.inner.Stat(name) }

// SyncDir implements FS.
func (e *ErrorFS) SyncDir(dir string) error {
	if _, err := e.check(OpSyncDir, dir); err != nil {
		return &os.PathError{Op: "syncdir", Path: dir, Err: err}
	}
	return e.inner.SyncDir(dir)
}

// Lock implements FS.
func (e *ErrorFS) Lock(name string) (io.Closer, error) { return e.inner.Lock(name) }

// DiskUsage implements FS. After SetFreeBytes the free bytes reported are
// at most the remaining budget.
func (e *ErrorFS) DiskUsage(path string) (uint64, uint64, error) {
	total, free, err := e.inner.DiskUsage(path)
	if err != nil {
		return 0, 0, err
	}
	e.spaceMu.Lock()
	defer e.spaceMu.Unlock()
	if e.freeBytes >= 0 && uint64(e.freeBytes) < free {
		free = uint64(e.freeBytes)
	}
	return total, free, nil
}

func (e *ErrorFS) sizeOf(name string) int64 {
	fi, err := e.inner.Stat(name)
	if err != nil || fi.IsDir() {
		return 0
	}
	return fi.Size()
}
