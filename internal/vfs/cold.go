package vfs

import "os"

// ReadaheadDisabler is implemented by files whose descriptor can be told
// not to read ahead (OS: posix_fadvise POSIX_FADV_RANDOM, which affects
// only that descriptor). A cold reader needs it: pages the kernel reads
// ahead of a read lie outside the range the reader probed and released, so
// they would stay cached.
type ReadaheadDisabler interface {
	DisableReadahead() error
}

// OpenCold opens path read-only for ReadCold, on a descriptor of its own
// with read-ahead disabled where the file allows (ReadaheadDisabler; an
// error there is ignored: reads still work, some read-ahead pages may stay
// cached).
func OpenCold(fs FS, path string) (File, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	if d, ok := f.(ReadaheadDisabler); ok {
		_ = d.DisableReadahead()
	}
	return f, nil
}

// ReadCold reads len(p) bytes at off of f (returning what ReadAt returns)
// without keeping in the page cache what the read brought in: it asks f
// which pages of the range are not cached (CacheProber), reads, then
// releases those pages (CacheDropper). Pages that were cached stay, so a
// background reader of cold data (the store's scrubber) does not push hot
// data out. A page another reader brings in between the probe and the
// release loses its cache once; the contents never change. On a file that
// cannot probe or release, it is ReadAt (the kernel decides). Use a
// descriptor from OpenCold: read-ahead on a shared one would bring in pages
// past the range.
func ReadCold(f File, p []byte, off int64) (int, error) {
	pr, ok1 := f.(CacheProber)
	d, ok2 := f.(CacheDropper)
	if !ok1 || !ok2 {
		return f.ReadAt(p, off)
	}
	cold, perr := pr.UncachedRanges(off, int64(len(p)))
	n, err := f.ReadAt(p, off)
	if perr == nil {
		for _, r := range cold {
			_ = d.DropCache(r.Off, r.Len) // best effort: a failure leaves pages to the kernel
		}
	}
	return n, err
}
