package vfs

// ReadCold reads len(p) bytes at off of f (returning what ReadAt returns)
// without keeping in the page cache what the read brought in: it asks f
// which pages of the range are not cached (CacheProber), reads, then
// releases those pages (CacheDropper). Pages that were cached stay, so a
// background reader of cold data (the store's scrubber) does not push hot
// data out. A page another reader brings in between the probe and the
// release loses its cache once; the contents never change. On a file that
// cannot probe or release, it is ReadAt (the kernel decides).
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
