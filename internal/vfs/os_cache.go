package vfs

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxProbeBytes bounds the mapping one UncachedRanges call makes (a longer
// range is probed in pieces).
const maxProbeBytes = 64 << 20

// DisableReadahead implements ReadaheadDisabler (POSIX_FADV_RANDOM on
// this descriptor only).
func (f osFile) DisableReadahead() error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var adv error
	if err := rc.Control(func(fd uintptr) { adv = unix.Fadvise(int(fd), 0, 0, unix.FADV_RANDOM) }); err != nil {
		return err
	}
	if adv != nil {
		return &os.PathError{Op: "fadvise", Path: f.File.Name(), Err: adv}
	}
	return nil
}

// UncachedRanges implements CacheProber with mincore(2) of a read-only
// shared mapping of the range. The mapping is never read or written, so it
// brings no page in and changes nothing (it only tells the kernel's view of
// the page cache); it is removed before returning. The descriptor is held
// for the call (SyscallConn), so a concurrent Close cannot hand it to
// another file.
func (f osFile) UncachedRanges(off, n int64) ([]Range, error) {
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	page := int64(os.Getpagesize())
	start, end := off-off%page, min(off+n, size)
	var out []Range
	for pos := start; pos < end; pos += maxProbeBytes {
		if err := f.probe(pos, min(end-pos, maxProbeBytes), page, &out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// probe appends the uncached pages of [pos, pos+n) (pos page-aligned).
func (f osFile) probe(pos, n, page int64, out *[]Range) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	if err := rc.Control(func(fd uintptr) {
		m, err := unix.Mmap(int(fd), pos, int(n), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			perr = err
			return
		}
		defer unix.Munmap(m)
		vec := make([]byte, (n+page-1)/page)
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
		if errno != 0 {
			perr = errno
			return
		}
		for i, v := range vec {
			if v&1 != 0 {
				continue
			}
			p := pos + int64(i)*page
			l := min(page, pos+n-p)
			if k := len(*out); k > 0 && (*out)[k-1].Off+(*out)[k-1].Len == p {
				(*out)[k-1].Len += l
			} else {
				*out = append(*out, Range{p, l})
			}
		}
	}); err != nil {
		return err
	}
	if perr != nil {
		return &os.PathError{Op: "mincore", Path: f.File.Name(), Err: fmt.Errorf("probe [%d, %d): %w", pos, pos+n, perr)}
	}
	return nil
}
