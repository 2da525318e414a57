package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
)

// maxKeptWriteBuffer bounds the write buffer kept between appends.
const maxKeptWriteBuffer = 8 << 20

// PatchFunc is called by Append for record i of the batch, copied into the
// write buffer, once its CommitLog offset phys is known and before its CRC is
// computed. It may rewrite fixed-size fields of rec in place.
type PatchFunc func(i int, rec []byte, phys int64)

// Append writes recs, each followed by its CRC, at the end of the log with
// one write per segment touched. When recs do not fit in what is left of
// the current segment, it closes the segment with a blank marker and writes
// them all in the next one; a batch larger than a segment is split, closing
// a segment when the next record does not fit. It returns the new written
// offset. recs are not modified (they are copied into the log's write
// buffer first).
//
// On a write or fsync error the log fails permanently (see Err), except for
// a write that ran out of space before any record of recs was written: then
// the error wraps ErrNoSpace, the written offset is unchanged (or at the
// start of the next segment, if the current one was closed) and recs may be
// appended again later (patch is called again for them). That is always the
// case for a batch that fits in one segment. Append must not be called
// concurrently with itself, Recover, Truncate or DeleteBefore.
func (l *Log) Append(recs [][]byte, patch PatchFunc) (int64, error) {
	if err := l.Err(); err != nil {
		return 0, err
	}
	if !l.recovered {
		return 0, ErrNotRecovered
	}
	total := 0
	for i, rec := range recs {
		if err := l.checkAppendable(rec); err != nil {
			return 0, fmt.Errorf("commitlog: record %d of batch: %w", i, err)
		}
		total += len(rec) + TrailerBytes
	}
	pos := l.written.Load()
	// A batch that does not fit in what is left of the current segment but
	// fits in a fresh one starts the next segment; the rest of this one
	// becomes blank (as RocketMQ does with a message that does not fit).
	// Split across the boundary, records of the batch would be in the log
	// before the write into the new segment, and if that write ran out of
	// space the log would have to fail. Only a batch larger than a segment
	// is still split.
	segEnd := l.SegmentStart(pos) + l.cfg.SegmentBytes
	if n := int64(total) + BlankBytes; pos+n > segEnd && n <= l.cfg.SegmentBytes {
		if err := l.writeAndSeal(appendBlank(l.wbuf[:0], segEnd-pos), pos, true); err != nil {
			return 0, err
		}
		pos = segEnd
	}
	bufStart := pos
	// One allocation at most: growing the buffer record by record copied
	// a large batch several times over (16 % of the CPU of an ASYNC batch
	// workload went to growslice).
	buf := slices.Grow(l.wbuf[:0], total+BlankBytes)
	published := false // records of recs are in the log: a later failure is fatal
	for i, rec := range recs {
		n := int64(len(rec)) + TrailerBytes
		segEnd = l.SegmentStart(pos) + l.cfg.SegmentBytes
		if pos+n+BlankBytes > segEnd {
			buf = appendBlank(buf, segEnd-pos)
			if err := l.writeAndSeal(buf, bufStart, !published); err != nil {
				return 0, err
			}
			published = published || len(buf) > BlankBytes
			pos, bufStart, buf = segEnd, segEnd, buf[:0]
		}
		start := len(buf)
		buf = append(buf, rec...)
		buf = append(buf, 0, 0, 0, 0)
		r := buf[start : start+len(rec)]
		if patch != nil {
			patch(i, r, pos)
		}
		put32(buf[start+len(rec):], Checksum(r))
		pos += n
	}
	if len(buf) > 0 {
		if err := l.write(buf, bufStart, !published); err != nil {
			return 0, err
		}
	}
	if cap(buf) <= maxKeptWriteBuffer {
		l.wbuf = buf[:0]
	} else {
		l.wbuf = nil
	}
	return pos, nil
}

func (l *Log) checkAppendable(rec []byte) error {
	n := int64(len(rec))
	if n < headerBytes {
		return fmt.Errorf("record of %d bytes is shorter than its header: %w", n, ErrTooLarge)
	}
	if n+TrailerBytes+BlankBytes > l.cfg.SegmentBytes {
		return fmt.Errorf("record of %d bytes, segment size %d: %w", n, l.cfg.SegmentBytes, ErrTooLarge)
	}
	magic := int32(be32(rec[4:8]))
	if int64(be32(rec[0:4])) != n || record.TypeOfMagic(magic) == record.Unknown {
		return fmt.Errorf("commitlog: record header (size %d, magic %#x) does not describe a %d-byte record of a known type",
			int32(be32(rec[0:4])), be32(rec[4:8]), n)
	}
	return nil
}

func appendBlank(buf []byte, remaining int64) []byte {
	var b [BlankBytes]byte
	put32(b[0:4], uint32(remaining))
	put32(b[4:8], u32(message.MagicBlank))
	return append(buf, b[:]...)
}

// write writes buf at CommitLog offset off (inside one segment) and
// publishes the new written offset. If retryable, a lack of space leaves
// the log usable (undoWrite); any other failure fails it.
func (l *Log) write(buf []byte, off int64, retryable bool) error {
	s, err := l.segmentForWrite(off, retryable)
	if err != nil {
		return err
	}
	end := off + int64(len(buf))
	l.beginWrite(off, end)
	if _, err := s.f.WriteAt(buf, off-s.base); err != nil {
		err = fmt.Errorf("commitlog: write %d bytes to %s at %d: %w", len(buf), s.path, off-s.base, err)
		if retryable && IsNoSpace(err) {
			return l.undoWrite(s, off, err)
		}
		return l.fail(err)
	}
	l.win.put(off, buf) // before the written offset shows the bytes
	if l.written.Advance(end) {
		l.written.Release()
	}
	l.wakeFlusher()
	if !l.cfg.NotifyFlushedOnly {
		l.notify()
	}
	if l.noSpace {
		l.noSpace = false
		l.resumePrefill()
		l.logger.Info("commitlog: writing again after the disk was full", "offset", off)
	}
	l.afterWrite(end)
	return nil
}

// IsNoSpace reports whether err says the disk (or the user's quota) is full.
func IsNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// undoWrite handles a write at off that failed for lack of space: it cuts
// s back to off, so that no part of the failed write (a short write may
// have left whole records) can be found by recovery or overlap the next
// write, and returns an error wrapping ErrNoSpace. If the cut fails the log
// fails.
func (l *Log) undoWrite(s *segment, off int64, cause error) error {
	l.forgetPrefill(off)
	rel := off - s.base
	size, err := s.f.Size()
	if err == nil && size > rel {
		err = s.f.Truncate(rel)
	}
	if err != nil {
		return l.fail(fmt.Errorf("%w; cutting %s back to %d failed too: %w", cause, s.path, rel, err))
	}
	return l.noSpaceErr(cause)
}

// noSpaceErr wraps cause with ErrNoSpace, logging the first of a series.
func (l *Log) noSpaceErr(cause error) error {
	if !l.noSpace {
		l.noSpace = true
		l.logger.Warn("commitlog: disk full; batch not written, later appends retry", "err", cause)
	}
	return fmt.Errorf("%w: %w", ErrNoSpace, cause)
}

// writeAndSeal writes buf, which ends with the blank marker closing its
// segment, and makes the whole segment durable before the next one may be
// created (the ordering recovery relies on).
func (l *Log) writeAndSeal(buf []byte, off int64, retryable bool) error {
	if err := l.write(buf, off, retryable); err != nil {
		return err
	}
	s, err := l.segmentForWrite(off, false)
	if err != nil {
		return err
	}
	if err := l.syncSegment(s, " (closed segment)"); err != nil {
		return err
	}
	// The segment is closed: the next append, even one retried after the
	// rest of this batch ran out of space, starts in the next segment.
	l.win.skip(s.base + l.cfg.SegmentBytes)
	l.written.Store(s.base + l.cfg.SegmentBytes)
	return nil
}

// segmentForWrite returns the segment holding off, creating it if off is
// the start of the segment after the last one. If retryable, a creation
// that fails for lack of space leaves the log usable.
func (l *Log) segmentForWrite(off int64, retryable bool) (*segment, error) {
	l.segMu.RLock()
	s := l.segmentLocked(off)
	l.segMu.RUnlock()
	if s != nil {
		return s, nil
	}
	base := l.SegmentStart(off)
	l.segMu.RLock()
	n := len(l.segs)
	ok := n == 0 || l.segs[n-1].base+l.cfg.SegmentBytes == base
	l.segMu.RUnlock()
	if !ok {
		panic(fmt.Sprintf("commitlog: write at %d is not in or right after the last segment", off))
	}
	return l.createSegment(base, retryable)
}

func (l *Log) createSegment(base int64, retryable bool) (*segment, error) {
	path := filepath.Join(l.cfg.Dir, SegmentName(base))
	f, err := l.cfg.FS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		err = fmt.Errorf("commitlog: create segment %s: %w", path, err)
		if retryable && IsNoSpace(err) {
			return nil, l.noSpaceErr(err)
		}
		return nil, l.fail(err)
	}
	if err := l.cfg.FS.SyncDir(l.cfg.Dir); err != nil {
		f.Close()
		return nil, l.fail(fmt.Errorf("commitlog: sync dir %s: %w", l.cfg.Dir, err))
	}
	s := &segment{base: base, path: path, f: f}
	l.segMu.Lock()
	l.segs = append(l.segs, s)
	l.segMu.Unlock()
	return s, nil
}
