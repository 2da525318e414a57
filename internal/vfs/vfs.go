// Package vfs is the filesystem interface every byte of Keel's storage goes
// through. Production code uses OS; tests use the crash-simulating MemFS
// (which forgets every byte not covered by a completed Sync when it "loses
// power", or with CrashCloneWriteBack keeps any subset of the unsynced
// pages, as a page cache writing back in no order) and ErrorFS (which fails
// chosen operations or reports a full disk). A process kill does not test
// durability (the page cache survives it): only MemFS power-loss tests, and
// real power loss, exercise fsync.
//
// The interface is deliberately small: positional reads and writes, fdatasync,
// truncate, rename, remove, directory listing and sync, an exclusive lock and
// a disk usage probe. Keel does not read through mmap; reads are pread(2)
// from the page cache, which keeps the crash semantics of the fault-injecting
// filesystems exact. (The one mapping Keel makes is CacheProber's, which is
// never touched.)
//
// Helpers on top of it: MkdirAllDurable and WriteFileDurable (temporary
// file, fsync, rename, directory sync) for small metadata files;
// CacheDropper (OS: posix_fadvise DONTNEED) releases cached pages without
// changing contents; CacheProber (mincore of an untouched mapping) tells
// which pages are cached; ReadCold, on a descriptor from OpenCold
// (read-ahead off), reads without leaving in the cache the pages it
// brought in (cold.go).
package vfs

import (
	"io"
	"os"
)

// File is an open file. Implementations must allow concurrent ReadAt calls
// with one concurrent writer (WriteAt/Truncate/Sync).
type File interface {
	io.ReaderAt
	io.WriterAt
	io.Closer
	// Sync makes every write completed before the call durable (fdatasync).
	// After a failed Sync the contents of the page cache are undefined.
	Sync() error
	// Truncate changes the size of the file.
	Truncate(size int64) error
	// Size returns the current size of the file.
	Size() (int64, error)
	// Name returns the path the file was opened with.
	Name() string
}

// CacheDropper is implemented by files whose cached pages can be released
// (OS: posix_fadvise POSIX_FADV_DONTNEED). Dropping never changes what the
// file holds: the kernel frees the clean pages of the range so that their
// memory is reused; dirty ones stay (it only starts writing them back). A
// read of the range afterwards comes from the disk.
type CacheDropper interface {
	DropCache(off, n int64) error
}

// CacheProber is implemented by files that can tell which of their pages
// are in the page cache without bringing any in (OS: mincore(2) of a
// read-only mapping that is never touched; Keel reads nothing through it).
// A reader that must not push hot data out of the cache probes a range,
// reads it, then releases (CacheDropper) only the pages that were not
// cached before.
type CacheProber interface {
	// UncachedRanges returns the page-aligned ranges of [off, off+n),
	// clipped to the file's size, whose pages are not in the page cache,
	// in order and coalesced.
	UncachedRanges(off, n int64) ([]Range, error)
}

// Range is a byte range of a file.
type Range struct{ Off, Len int64 }

// FS is a filesystem.
type FS interface {
	// OpenFile opens name with os.O_* flags (O_RDONLY, O_RDWR, O_CREATE,
	// O_EXCL, O_TRUNC are supported; O_APPEND is not).
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// Remove removes a file or an empty directory.
	Remove(name string) error
	// Rename atomically replaces newname with oldname. It is durable only
	// after SyncDir of the directory.
	Rename(oldname, newname string) error
	// MkdirAll creates dir and its parents.
	MkdirAll(dir string, perm os.FileMode) error
	// List returns the base names of the entries of dir, sorted.
	List(dir string) ([]string, error)
	// Stat returns information about name.
	Stat(name string) (os.FileInfo, error)
	// SyncDir makes the creations, renames and removals of entries in dir
	// durable.
	SyncDir(dir string) error
	// Lock takes an exclusive lock on the file name (creating it), for one
	// process owning a data directory. Close the result to release it.
	Lock(name string) (io.Closer, error)
	// DiskUsage reports the total and available bytes of the filesystem
	// holding path.
	DiskUsage(path string) (totalBytes, freeBytes uint64, err error)
}
