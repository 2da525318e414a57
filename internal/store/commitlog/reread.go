package commitlog

import (
	"fmt"

	"github.com/keelmq/keel/internal/vfs"
)

// Re-reading after a failed verification. A record that fails its checksum
// on read is either damaged on disk or was read wrong: some filesystems
// (FUSE without page-cache control, a flaky controller) return bad bytes
// once and the right ones the next time. RereadEntry tells the two apart:
// it releases the cached pages of the entry (vfs.CacheDropper; clean pages
// only, so the next read goes to the disk, or to the FUSE daemon) and reads
// it again into a fresh buffer. Whether the second read verifies decides
// what the caller does; the bytes on disk are never changed here.

// RereadEntry reads and verifies the entry of size bytes at off again,
// bypassing the page cache where the filesystem allows it and the read
// window always, into a new buffer. It returns the record without its
// trailer.
func (l *Log) RereadEntry(off int64, size int32) ([]byte, error) {
	if size < headerBytes || int64(size)+TrailerBytes+BlankBytes > l.cfg.SegmentBytes {
		return nil, fmt.Errorf("commitlog: entry at %d: size %d out of range: %w", off, size, ErrCorrupt)
	}
	l.dropEntryCache(off, int64(size)+TrailerBytes)
	return l.readEntry(off, size, nil, false) // the file, not the read window
}

// RereadRecord is RereadEntry for a record whose size is read from its
// header (ReadRecord): the cached pages of up to MaxRecordBytes (or a
// reader chunk) from off are released first.
func (l *Log) RereadRecord(off int64) ([]byte, error) {
	n := int64(readerChunkBytes)
	if l.cfg.MaxRecordBytes > 0 {
		n = l.cfg.MaxRecordBytes + TrailerBytes
	}
	l.dropEntryCache(off, min(n, l.SegmentStart(off)+l.cfg.SegmentBytes-off))
	return l.readRecord(off, nil, false) // the file, not the read window
}

// dropEntryCache releases the cached pages of [off, off+n) of the segment
// holding off, if its file can. Errors are ignored: the re-read then comes
// from the cache, which is no worse than not trying.
func (l *Log) dropEntryCache(off, n int64) {
	l.segMu.RLock()
	defer l.segMu.RUnlock()
	s := l.segmentLocked(off)
	if s == nil {
		return
	}
	if d, ok := s.f.(vfs.CacheDropper); ok {
		_ = d.DropCache(off-s.base, n)
	}
}

// Reread makes the next call of Next read its entry again from the file,
// bypassing the page cache where the filesystem allows it (see
// RereadEntry), instead of from the Reader's buffer or the read window.
func (r *Reader) Reread() {
	r.n = 0
	r.fromFile = true
	end := min(r.l.SegmentStart(r.pos)+r.l.cfg.SegmentBytes, r.l.written.Load())
	if end > r.pos {
		r.l.dropEntryCache(r.pos, min(end-r.pos, readerChunkBytes))
	}
}
