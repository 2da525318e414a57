package commitlog

import (
	"errors"
	"fmt"

	"github.com/keelmq/keel/internal/message"
)

// Raw ranges: the bytes of the log as they are on disk (records with their
// CRC trailers, and the blank marker closing a segment), for replication.
// A range never crosses a segment boundary; one that ends with a blank
// marker ends its segment.

// ErrNotAtEnd: AppendRaw was asked to write somewhere other than the
// written offset.
var ErrNotAtEnd = errors.New("commitlog: raw append not at the written offset")

// WalkRaw calls fn for each entry of raw, a range starting at CommitLog
// offset off of a log with segments of segBytes: the entry's offset, its
// bytes (a record with its trailer, or a blank marker) and whether it is a
// blank marker. It verifies every record (size, CRC, known type) and that a
// blank marker closes its segment and comes last; it returns the first
// problem (wrapping ErrCorrupt) and the offset after the last good entry.
func WalkRaw(raw []byte, off, segBytes int64, fn func(pos int64, entry []byte, blank bool) error) (int64, error) {
	pos := off
	segEnd := off - off%segBytes + segBytes
	for i := 0; i < len(raw); {
		if len(raw)-i < headerBytes {
			return pos, fmt.Errorf("commitlog: raw range at %d: %d bytes left, less than a header: %w", pos, len(raw)-i, ErrCorrupt)
		}
		total, magic := int64(int32(be32(raw[i:]))), int32(be32(raw[i+4:]))
		if magic == message.MagicBlank {
			if total != segEnd-pos || i+BlankBytes != len(raw) {
				return pos, fmt.Errorf("commitlog: raw range: blank marker at %d (size %d) does not close segment ending at %d as the last entry: %w",
					pos, total, segEnd, ErrCorrupt)
			}
			if err := fn(pos, raw[i:], true); err != nil {
				return pos, err
			}
			return segEnd, nil
		}
		n := total + TrailerBytes
		if total < headerBytes || int64(i)+n > int64(len(raw)) || pos+n+BlankBytes > segEnd {
			return pos, fmt.Errorf("commitlog: raw range: entry at %d of size %d does not fit: %w", pos, total, ErrCorrupt)
		}
		e := raw[i : i+int(n)]
		if err := verifyEntry(e, pos, int32(total), nil); err != nil {
			if errors.Is(err, ErrNoRecord) {
				err = fmt.Errorf("%w: %w", ErrCorrupt, err)
			}
			return pos, err
		}
		if err := fn(pos, e, false); err != nil {
			return pos, err
		}
		i += int(n)
		pos += n
	}
	return pos, nil
}

// AppendRaw writes raw, verified with WalkRaw (and the log's CheckRecord),
// at exactly off, which must be the written offset, and returns the new
// written offset. A range ending with a blank marker closes its segment (it
// is synced, and the next append starts the next segment). A write that
// finds the disk full leaves the log usable (the error wraps ErrNoSpace);
// any other failure fails the log. It must not be called concurrently with
// Append or itself.
func (l *Log) AppendRaw(off int64, raw []byte) (int64, error) {
	return l.AppendRawChecked(off, raw, nil, nil)
}

// AppendRawChecked is AppendRaw with the caller's checks in its one
// verification walk, so that no record is verified twice: check, if set,
// is called for each record (with its trailer) once WalkRaw and
// CheckRecord passed it, and admit, if set, once the whole range passed,
// before a byte is written. An error of either refuses the range, nothing
// written, and is returned as it is.
func (l *Log) AppendRawChecked(off int64, raw []byte, check func(pos int64, entry []byte) error, admit func() error) (int64, error) {
	if err := l.Err(); err != nil {
		return 0, err
	}
	if !l.recovered {
		return 0, ErrNotRecovered
	}
	if w := l.written.Load(); off != w {
		return 0, fmt.Errorf("%w: offset %d, written %d", ErrNotAtEnd, off, w)
	}
	if len(raw) == 0 {
		return off, nil
	}
	sealed := false
	end, err := WalkRaw(raw, off, l.cfg.SegmentBytes, func(pos int64, e []byte, blank bool) error {
		if blank {
			sealed = true
			return nil
		}
		if l.cfg.CheckRecord != nil {
			if err := l.cfg.CheckRecord(e[:len(e)-TrailerBytes]); err != nil {
				return fmt.Errorf("commitlog: replicated entry at %d: %w: %w", pos, ErrCorrupt, err)
			}
		}
		if check != nil {
			return check(pos, e)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if admit != nil {
		if err := admit(); err != nil {
			return 0, err
		}
	}
	if sealed {
		err = l.writeAndSeal(raw, off, true)
	} else {
		err = l.write(raw, off, true)
	}
	if err != nil {
		return 0, err
	}
	return end, nil
}

// ReadRaw returns whole entries from off, which must be an entry's offset
// or a segment start, below limit and within at most max bytes (at least
// one entry if one is there, whatever its size): a range AppendRaw takes,
// and the offset after it. It stops after a blank marker (the next range
// starts at the next segment). It does not verify records (the receiver
// does). buf is reused if large enough.
func (l *Log) ReadRaw(off, limit int64, max int, buf []byte) ([]byte, int64, error) {
	segEnd := l.SegmentStart(off) + l.cfg.SegmentBytes
	if limit > segEnd {
		limit = segEnd
	}
	if off >= limit {
		return buf[:0], off, nil
	}
	want := int(min(limit-off, int64(max)))
	if want < headerBytes {
		want = int(min(limit-off, headerBytes))
	}
	if cap(buf) < want {
		buf = make([]byte, want)
	}
	buf = buf[:want]
	n, err := l.readUpTo(buf, off, min(want, headerBytes))
	if err != nil {
		return nil, off, err
	}
	buf = buf[:n]
	out, pos := 0, off
	for out+headerBytes <= len(buf) {
		total, magic := int64(int32(be32(buf[out:]))), int32(be32(buf[out+4:]))
		if magic == message.MagicBlank && total == segEnd-pos {
			return buf[:out+BlankBytes], segEnd, nil
		}
		m := total + TrailerBytes
		if total < headerBytes || pos+m > limit {
			if out == 0 {
				return nil, off, fmt.Errorf("commitlog: raw read: entry at %d of size %d does not fit below %d: %w", pos, total, limit, ErrCorrupt)
			}
			break
		}
		if int64(out)+m > int64(len(buf)) {
			if out > 0 {
				break
			}
			// One entry larger than max: read it whole.
			big := make([]byte, m)
			if err := l.ReadAt(big, pos); err != nil {
				return nil, off, err
			}
			return big, pos + m, nil
		}
		out += int(m)
		pos += m
	}
	return buf[:out], pos, nil
}
