package commitlog

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/keelmq/keel/internal/message"
)

// readerChunkBytes is how much a Reader reads ahead in one pread.
const readerChunkBytes = 1 << 20

// Reader reads records sequentially, skipping blank markers and hole
// records, verifying every entry. It is used by one goroutine (the dispatcher, a checker).
type Reader struct {
	l     *Log
	pos   int64
	buf   []byte
	start int64 // CommitLog offset of buf[0]
	n     int
	// lastHole is the offset of the last hole record skipped, -1 if none.
	lastHole int64
	// fromFile: reads go to the file, not the read window, until Next
	// returns a record (Reread).
	fromFile bool
	// fileOnly: every read goes to the file (NewFileReader).
	fileOnly bool
}

// NewReader returns a Reader positioned at from, which must be the offset
// of an entry, a blank marker or a segment start.
func (l *Log) NewReader(from int64) *Reader {
	return &Reader{l: l, pos: from, lastHole: -1}
}

// NewFileReader is NewReader for a Reader whose reads all go to the file,
// never to the read window: the store's dispatcher, whose verification of
// the records just written is the check of the write path (the window
// holds the bytes as they were handed to the kernel, not as the file
// returns them). It reads a chunk per read, not a record, so the window
// would save it little.
func (l *Log) NewFileReader(from int64) *Reader {
	return &Reader{l: l, pos: from, lastHole: -1, fileOnly: true}
}

// LastHole returns the offset of the last hole record (see hole.go) the
// Reader skipped, or -1.
func (r *Reader) LastHole() int64 { return r.lastHole }

// Offset returns the offset of the next entry to read.
func (r *Reader) Offset() int64 { return r.pos }

// Next returns the next record below limit and its offset. The record
// aliases the Reader's buffer until the next call. It returns io.EOF when
// the position reached limit, and an error wrapping ErrCorrupt for an entry
// that fails verification (the position does not move past it).
func (r *Reader) Next(limit int64) ([]byte, int64, error) {
	segBytes := r.l.cfg.SegmentBytes
	for {
		if r.pos >= limit {
			return nil, 0, io.EOF
		}
		segEnd := r.l.SegmentStart(r.pos) + segBytes
		h, err := r.get(headerBytes, min(limit, segEnd))
		if err != nil {
			return nil, 0, err
		}
		total, magic := int64(int32(be32(h[0:4]))), int32(be32(h[4:8]))
		if magic == message.MagicBlank && total == segEnd-r.pos {
			r.pos = segEnd
			continue
		}
		if magic == MagicHole && total >= headerBytes && r.pos+total+TrailerBytes <= min(limit, segEnd) {
			r.lastHole, r.pos = r.pos, r.pos+total+TrailerBytes // verified by recovery and Check
			continue
		}
		if total < headerBytes || r.pos+total+TrailerBytes > min(limit, segEnd) {
			return nil, 0, fmt.Errorf("commitlog: entry at %d: size %d, magic %#08x does not fit below %d: %w",
				r.pos, total, u32(magic), min(limit, segEnd), ErrCorrupt)
		}
		e, err := r.get(int(total)+TrailerBytes, min(limit, segEnd))
		if err != nil {
			return nil, 0, err
		}
		if err := r.l.VerifyEntry(e, r.pos, int32(total)); err != nil {
			return nil, 0, err
		}
		phys := r.pos
		r.pos += total + TrailerBytes
		r.fromFile = false
		return e[:total], phys, nil
	}
}

// get returns n bytes at r.pos, reading ahead up to bound.
func (r *Reader) get(n int, bound int64) ([]byte, error) {
	if r.pos >= r.start && r.pos+int64(n) <= r.start+int64(r.n) {
		off := r.pos - r.start
		return r.buf[off : off+int64(n)], nil
	}
	if r.pos+int64(n) > bound {
		return nil, fmt.Errorf("commitlog: entry header at %d crosses %d: %w", r.pos, bound, ErrCorrupt)
	}
	k := int(min(int64(max(n, readerChunkBytes)), bound-r.pos))
	if cap(r.buf) < k {
		r.buf = make([]byte, k)
	}
	got, err := r.l.read(r.buf[:k], r.pos, n, !r.fromFile && !r.fileOnly)
	if err != nil {
		r.n = 0
		return nil, err
	}
	r.start, r.n = r.pos, got
	return r.buf[:n], nil
}

// DeleteBefore removes the segment files that end at or before off, never
// the last segment nor bytes not yet flushed. It returns the removed paths.
func (l *Log) DeleteBefore(off int64) ([]string, error) {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	off = min(off, l.flushed.Load())
	var removed []string
	for {
		l.segMu.RLock()
		var victim *segment
		if len(l.segs) > 1 && l.segs[0].base+l.cfg.SegmentBytes <= off {
			victim = l.segs[0]
		}
		l.segMu.RUnlock()
		if victim == nil {
			break
		}
		if err := l.removeSegment(victim); err != nil {
			return removed, err
		}
		removed = append(removed, victim.path)
	}
	if len(removed) > 0 {
		if err := l.cfg.FS.SyncDir(l.cfg.Dir); err != nil {
			return removed, fmt.Errorf("commitlog: sync dir %s: %w", l.cfg.Dir, err)
		}
		l.logger.Info("commitlog: removed old segments", "count", len(removed), "first", filepath.Base(removed[0]))
	}
	return removed, nil
}

// IsNoRecord reports whether err says an offset holds no record (deleted or
// blank space), as opposed to corruption or an I/O error.
func IsNoRecord(err error) bool { return errors.Is(err, ErrNoRecord) }
