package commitlog

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// Scrubbing: re-verifying durable records at rest, a bounded number of
// bytes at a time, without disturbing the page cache. The scrubber reads a
// segment through a descriptor of its own with read-ahead disabled
// (vfs.OpenCold: pages read ahead would lie outside what it probes and
// releases). Each read first asks the file which pages of the range are
// cached (vfs.CacheProber), reads, then releases (vfs.CacheDropper) only
// the pages that were not cached before: data consumers read stays cached,
// cold data the scrubber brought in does not stay. A page a consumer starts reading between the probe and
// the release loses its cache once (it is read again from the disk); the
// contents never change. On a file that cannot probe, nothing is released
// (the kernel decides, as for any read).

// scrubHintBytes is how much of an invalid entry a ScrubFinding keeps.
const scrubHintBytes = 64

// ScrubFinding is an entry the scrubber found invalid.
type ScrubFinding struct {
	Offset int64  // CommitLog offset of the entry
	Size   int32  // its TOTALSIZE if plausible (fits the segment), else 0
	Next   int64  // where scrubbing resumes: the next valid entry, or the segment end
	Reason string // why the entry is invalid
	Head   []byte // the entry's first bytes as read (a copy), for hints
}

// Scrubber walks the log from an offset, verifying every entry. It is used
// by one goroutine.
type Scrubber struct {
	l        *Log
	pos      int64
	buf      []byte
	cold     vfs.File // own descriptor of the segment at coldPath (read-ahead off)
	coldPath string
}

// NewScrubber returns a Scrubber positioned at from, which must be the
// offset of an entry, a blank marker or a segment start.
func (l *Log) NewScrubber(from int64) *Scrubber { return &Scrubber{l: l, pos: from} }

// Offset returns where the next Step starts.
func (sc *Scrubber) Offset() int64 { return sc.pos }

// SkipSegment moves the position to the start of the next segment (after a
// read error the rest of the segment cannot be scrubbed).
func (sc *Scrubber) SkipSegment() { sc.pos = sc.l.SegmentStart(sc.pos) + sc.l.cfg.SegmentBytes }

// Step verifies entries from the current position below limit, reading at
// most maxBytes (but always at least one whole entry, so a large record
// may exceed it). visit gets each valid record (aliasing an internal
// buffer until the next Step), bad each invalid entry, after which the
// position moves to ScrubFinding.Next. It returns the bytes read; 0 with a
// nil error means the position reached limit. A position below the oldest
// segment (retention) moves to its start.
func (sc *Scrubber) Step(limit, maxBytes int64, visit func(phys int64, rec []byte), bad func(ScrubFinding)) (int64, error) {
	l := sc.l
	buf, short, segEnd, end, err := sc.fill(limit, maxBytes)
	if err != nil || buf == nil {
		return 0, err
	}
	read := int64(len(buf))
	for off := int64(0); off+headerBytes <= int64(len(buf)); {
		pos := sc.pos
		total, magic := int64(int32(be32(buf[off:]))), int32(be32(buf[off+4:]))
		if magic == message.MagicBlank && total == segEnd-pos {
			sc.pos = segEnd
			return read, nil
		}
		rel := pos - (segEnd - l.cfg.SegmentBytes)
		bounds := checkEntryBounds
		if magic == MagicHole {
			bounds = func(_ int32, total, pos, size, segBytes int64) string {
				return checkSizeBounds(total, pos, size, segBytes)
			}
		}
		if reason := bounds(magic, total, rel, l.cfg.SegmentBytes, l.cfg.SegmentBytes); reason != "" || pos+total+TrailerBytes > end {
			if reason == "" {
				reason = fmt.Sprintf("record of %d bytes extends past %d", total, end)
			}
			return read, sc.invalid(pos, 0, buf[off:], reason, bad)
		}
		entry := buf[off:min(off+total+TrailerBytes, int64(len(buf)))]
		if int64(len(entry)) < total+TrailerBytes {
			if short { // the file ends before the entry does
				return read, sc.invalid(pos, 0, entry, fmt.Sprintf("record of %d bytes extends past the end of the segment file", total), bad)
			}
			if off > 0 {
				return read, nil // the next Step reads it from its start
			}
			big := make([]byte, total+TrailerBytes)
			if _, err := sc.readCold(big, pos, len(big)); err != nil {
				if IsNoRecord(err) || errors.Is(err, ErrCorrupt) {
					return read, sc.invalid(pos, 0, entry, fmt.Sprintf("record of %d bytes cannot be read: %v", total, err), bad)
				}
				return read, err
			}
			read += int64(len(big))
			entry = big
		}
		if magic == MagicHole {
			// A repair's hole record: intact if its checksum matches; it
			// holds no record to visit.
			if Checksum(entry[:total]) != be32(entry[total:]) {
				return read, sc.invalid(pos, int32(total), entry, "hole record crc mismatch", bad)
			}
			sc.pos += total + TrailerBytes
			off += total + TrailerBytes
			continue
		}
		if err := l.VerifyEntry(entry, pos, int32(total)); err != nil {
			return read, sc.invalid(pos, int32(total), entry, err.Error(), bad)
		}
		visit(pos, entry[:total])
		sc.pos += total + TrailerBytes
		off += total + TrailerBytes
	}
	return read, nil
}

// ReadEntry reads and verifies the record of size bytes at off, as
// Log.ReadEntry does, through the scrubber's own descriptor (the pages it
// brings in are not kept cached), into buf (grown if needed). It returns
// the record without its trailer.
func (sc *Scrubber) ReadEntry(off int64, size int32, buf []byte) ([]byte, error) {
	if size < headerBytes || int64(size)+TrailerBytes+BlankBytes > sc.l.cfg.SegmentBytes {
		return nil, fmt.Errorf("commitlog: entry at %d: size %d out of range: %w", off, size, ErrCorrupt)
	}
	n := int(size) + TrailerBytes
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	if _, err := sc.readCold(buf[:n], off, n); err != nil {
		return nil, err
	}
	if err := sc.l.VerifyEntry(buf[:n], off, size); err != nil {
		return nil, err
	}
	return buf[:size], nil
}

// fill reads up to maxBytes (at least a header) from the position, within
// its segment and below limit, and returns them, whether the segment's file
// ended first (short), the segment's end and the end of what may be read;
// nil bytes at limit.
func (sc *Scrubber) fill(limit, maxBytes int64) (buf []byte, short bool, segEnd, end int64, err error) {
	l := sc.l
	for {
		sc.pos = max(sc.pos, l.MinOffset())
		if sc.pos >= limit {
			return nil, false, 0, 0, nil
		}
		segEnd = l.SegmentStart(sc.pos) + l.cfg.SegmentBytes
		end = min(limit, segEnd)
		want := min(end-sc.pos, max(maxBytes, headerBytes))
		if int64(cap(sc.buf)) < want {
			sc.buf = make([]byte, want)
		}
		n, err := sc.readCold(sc.buf[:want], sc.pos, int(min(want, headerBytes)))
		if IsNoRecord(err) {
			sc.pos = segEnd // past a closed segment's file, or removed meanwhile
			continue
		}
		if err != nil {
			return nil, false, 0, 0, err
		}
		return sc.buf[:n], int64(n) < want, segEnd, end, nil
	}
}

// invalid reports the entry at pos and moves past it: to the end of the
// entry if its size is plausible and a valid entry (or the end of the
// data) follows, else to the next valid entry of the segment, else to the
// segment's end.
func (sc *Scrubber) invalid(pos int64, size int32, head []byte, reason string, bad func(ScrubFinding)) error {
	next, err := sc.resume(pos, size)
	if err != nil {
		return err
	}
	f := ScrubFinding{Offset: pos, Size: size, Next: next, Reason: reason, Head: append([]byte(nil), head[:min(len(head), scrubHintBytes)]...)}
	sc.pos = next
	bad(f)
	return nil
}

func (sc *Scrubber) resume(pos int64, size int32) (int64, error) {
	l := sc.l
	segEnd := l.SegmentStart(pos) + l.cfg.SegmentBytes
	path, base, ok := sc.segment(pos)
	if !ok {
		return segEnd, nil
	}
	f, err := sc.file(path)
	if err != nil {
		return 0, err
	}
	fsize, err := f.Size()
	if err != nil {
		return 0, fmt.Errorf("commitlog: size of %s: %w", path, err)
	}
	r := coldReaderAt{f}
	if size > 0 {
		q := pos - base + int64(size) + TrailerBytes
		if q >= fsize || base+q >= l.written.Load() {
			return base + q, nil
		}
		if ok, err := validAt(r, q, fsize, l.cfg.SegmentBytes); err != nil && err != io.EOF {
			return 0, fmt.Errorf("commitlog: scrub %s: %w", path, err)
		} else if ok {
			return base + q, nil
		}
	}
	q, err := findValid(r, pos-base+1, fsize, l.cfg.SegmentBytes)
	if err != nil {
		return 0, fmt.Errorf("commitlog: scrub %s: %w", path, err)
	}
	if q < 0 {
		return segEnd, nil
	}
	return base + q, nil
}

// segment returns the path and base of the segment holding off. The
// scrubber reads it on its own descriptor without holding segMu, so that a
// slow cold read never delays a roll-over or retention; a segment removed
// meanwhile is still readable through a descriptor already open (and
// scrubbing it is harmless), and one removed before opening is skipped.
func (sc *Scrubber) segment(off int64) (string, int64, bool) {
	sc.l.segMu.RLock()
	defer sc.l.segMu.RUnlock()
	s := sc.l.segmentLocked(off)
	if s == nil {
		return "", 0, false
	}
	return s.path, s.base, true
}

// readCold reads like Log.readUpTo (at least need, at most len(p) bytes at
// off, within one segment and below the written offset) through the
// scrubber's own descriptor of the segment (vfs.OpenCold, vfs.ReadCold).
func (sc *Scrubber) readCold(p []byte, off int64, need int) (int, error) {
	l := sc.l
	if off < 0 || off+int64(need) > l.written.Load() {
		return 0, fmt.Errorf("commitlog: scrub read [%d, %d) beyond written offset %d: %w", off, off+int64(need), l.written.Load(), ErrBeyondEnd)
	}
	path, base, ok := sc.segment(off)
	if !ok {
		return 0, fmt.Errorf("commitlog: scrub: offset %d is not held (min %d): %w", off, l.MinOffset(), ErrNoRecord)
	}
	rel := off - base
	if rel+int64(len(p)) > l.cfg.SegmentBytes {
		return 0, fmt.Errorf("commitlog: scrub read [%d, %d) crosses the end of segment %s: %w", off, off+int64(len(p)), path, ErrCorrupt)
	}
	f, err := sc.file(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("commitlog: scrub: %s was removed: %w", path, ErrNoRecord)
	}
	if err != nil {
		return 0, err
	}
	n, err := vfs.ReadCold(f, p, rel)
	if n >= need {
		return n, nil
	}
	if err == io.EOF || err == nil {
		if l.written.Load() >= base+l.cfg.SegmentBytes {
			return 0, fmt.Errorf("commitlog: scrub read [%d, %d) past the end of %s: %w", off, off+int64(need), path, ErrNoRecord)
		}
		return 0, fmt.Errorf("commitlog: scrub read [%d, %d): %s is shorter than the written offset: %w", off, off+int64(need), path, ErrCorrupt)
	}
	return 0, fmt.Errorf("commitlog: scrub read %s at %d: %w", path, rel, err)
}

// file returns the scrubber's descriptor of path, opening it (and closing
// the previous segment's) when the scrubber moved to another segment.
func (sc *Scrubber) file(path string) (vfs.File, error) {
	if sc.cold != nil && sc.coldPath == path {
		return sc.cold, nil
	}
	sc.Close()
	f, err := vfs.OpenCold(sc.l.cfg.FS, path)
	if err != nil {
		return nil, fmt.Errorf("commitlog: scrub: open %s: %w", path, err)
	}
	sc.cold, sc.coldPath = f, path
	return f, nil
}

// Close releases the scrubber's descriptor. The Scrubber may be used
// again (it reopens what it needs).
func (sc *Scrubber) Close() error {
	if sc.cold == nil {
		return nil
	}
	err := sc.cold.Close()
	sc.cold, sc.coldPath = nil, ""
	return err
}

// coldReaderAt reads a segment for findValid and validAt through the
// scrubber's descriptor.
type coldReaderAt struct{ f vfs.File }

func (r coldReaderAt) ReadAt(p []byte, off int64) (int, error) { return vfs.ReadCold(r.f, p, off) }
