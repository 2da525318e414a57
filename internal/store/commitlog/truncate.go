package commitlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// Truncation of a replica's log (package replication): the bytes from an
// offset on are removed for good, durably, before anything new is written
// there. The caller (the store) records its intent durably first, so a
// crash part-way is finished on the next start (TruncateFiles) and the
// removed tail never comes back.

// ErrNotBoundary: a truncation offset that is not the start of an entry
// (nor a segment start) of the log.
var ErrNotBoundary = errors.New("commitlog: truncation offset is not an entry boundary")

// CheckBoundary walks the entries from from (an entry's offset or a
// segment start) to off and returns nil if off is where one starts or a
// segment starts; an error wrapping ErrNotBoundary otherwise. fn, if not
// nil, is called with every record in [from, off) (without its trailer).
func (l *Log) CheckBoundary(from, off int64, fn func(pos int64, rec []byte)) error {
	var hdr [headerBytes]byte
	var buf []byte
	for pos := from; pos < off; {
		segEnd := l.SegmentStart(pos) + l.cfg.SegmentBytes
		if err := l.ReadAt(hdr[:], pos); err != nil {
			return fmt.Errorf("commitlog: walk to %d: %w", off, err)
		}
		total, magic := int64(int32(be32(hdr[0:4]))), int32(be32(hdr[4:8]))
		if magic == message.MagicBlank && total == segEnd-pos {
			pos = segEnd
			continue
		}
		n := total + TrailerBytes
		if total < headerBytes || pos+n > segEnd {
			return fmt.Errorf("commitlog: walk to %d: entry at %d of size %d: %w", off, pos, total, ErrCorrupt)
		}
		if pos+n > off {
			return fmt.Errorf("%w: %d lies inside the entry [%d, %d)", ErrNotBoundary, off, pos, pos+n)
		}
		if fn != nil && magic != MagicHole {
			rec, err := l.ReadEntry(pos, int32(total), buf)
			if err != nil {
				return fmt.Errorf("commitlog: walk to %d: %w", off, err)
			}
			buf = rec[:cap(rec)]
			fn(pos, rec)
		}
		pos += n
	}
	return nil
}

// Truncate removes every byte from off on: the segments after the one
// holding off are removed (newest first, then the directory is synced),
// that segment's file is cut at off and synced (a segment starting at off
// is removed), and the written and flushed offsets move back to off. The
// caller guarantees that off is an entry boundary (CheckBoundary), that
// nothing is appended meanwhile, and that nobody waits for or reads bytes
// past off. A failure fails the log: what is on disk is then only known
// after a restart (which finishes the truncation from the caller's intent).
func (l *Log) Truncate(off int64) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	if off >= l.written.Load() {
		return nil
	}
	l.win.cut(off) // first: no byte from off on is served from memory again
	if err := l.lowerMark(off); err != nil {
		return l.fail(fmt.Errorf("commitlog: truncate at %d: %w", off, err))
	}
	l.prefillMu.Lock()
	l.waitPrefillChunk() // a zero-fill chunk in flight lands and syncs first
	defer l.prefillMu.Unlock()
	l.segMu.RLock()
	segs := slices.Clone(l.segs)
	l.segMu.RUnlock()
	removed := false
	for i := len(segs) - 1; i >= 0; i-- {
		s := segs[i]
		if s.base < off {
			break
		}
		if err := l.removeSegment(s); err != nil {
			return l.fail(fmt.Errorf("commitlog: truncate at %d: %w", off, err))
		}
		removed = true
	}
	if removed {
		if err := l.cfg.FS.SyncDir(l.cfg.Dir); err != nil {
			return l.fail(fmt.Errorf("commitlog: truncate at %d: sync dir %s: %w", off, l.cfg.Dir, err))
		}
	}
	l.segMu.RLock()
	s := l.segmentLocked(off)
	l.segMu.RUnlock()
	if s != nil {
		if err := s.f.Truncate(off - s.base); err != nil {
			return l.fail(fmt.Errorf("commitlog: truncate %s at %d: %w", s.path, off-s.base, err))
		}
		if err := s.f.Sync(); err != nil {
			return l.fail(fmt.Errorf("commitlog: fdatasync %s after truncating: %w", s.path, err))
		}
	}
	l.written.Store(off)
	if l.flushed.Load() > off {
		l.flushed.Store(off)
	}
	l.pf.writeEnd, l.pf.filled = off, off
	l.prefillAhead.Store(off)
	if l.cacheDropped.Load() > off {
		l.cacheDropped.Store(off)
	}
	l.logger.Warn("commitlog: truncated", "offset", off)
	return nil
}

// TruncateFiles is Truncate on a log directory that is not open (the
// store finishing an interrupted truncation before it opens the log): it
// lowers the flushed mark to off, removes the segment files starting at or
// after off (newest first), cuts the one holding off to off if it is
// longer, and syncs what it changed. Running it again after a crash
// part-way is harmless.
func TruncateFiles(fs vfs.FS, dir string, segBytes, off int64) error {
	if err := LowerMark(fs, dir, off); err != nil {
		return fmt.Errorf("commitlog: truncate at %d: %w", off, err)
	}
	names, err := fs.List(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("commitlog: list %s: %w", dir, err)
	}
	var bases []int64
	for _, name := range names {
		if base, ok := ParseSegmentName(name); ok {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	removed := false
	for i := len(bases) - 1; i >= 0 && bases[i] >= off; i-- {
		if err := fs.Remove(filepath.Join(dir, SegmentName(bases[i]))); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("commitlog: truncate at %d: %w", off, err)
		}
		removed = true
	}
	if removed {
		if err := fs.SyncDir(dir); err != nil {
			return fmt.Errorf("commitlog: truncate at %d: sync dir %s: %w", off, dir, err)
		}
	}
	base := off - off%segBytes
	if base == off {
		return nil
	}
	path := filepath.Join(dir, SegmentName(base))
	f, err := fs.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("commitlog: truncate: open %s: %w", path, err)
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return fmt.Errorf("commitlog: truncate: size of %s: %w", path, err)
	}
	if size > off-base {
		if err := f.Truncate(off - base); err != nil {
			return fmt.Errorf("commitlog: truncate %s at %d: %w", path, off-base, err)
		}
	}
	// Synced even when already short: the cut may be in the page cache only
	// (a crash between the cut and its fdatasync).
	if err := f.Sync(); err != nil {
		return fmt.Errorf("commitlog: fdatasync %s after truncating: %w", path, err)
	}
	return nil
}

// StartAt makes an empty log (no records: its written offset is its first
// segment's start, or it has no segment) start at off, a segment start:
// the empty segment files are removed, one at off is created (directory
// synced), and the written and flushed offsets move to off. A replica
// whose master's oldest segments were deleted starts its copy there. The
// caller guarantees that nothing is appended meanwhile.
func (l *Log) StartAt(off int64) error {
	l.flushMu.Lock()
	defer l.flushMu.Unlock()
	if err := l.Err(); err != nil {
		return err
	}
	if off%l.cfg.SegmentBytes != 0 || off < 0 {
		return fmt.Errorf("commitlog: start at %d: not a segment start", off)
	}
	w := l.written.Load()
	l.segMu.RLock()
	segs := slices.Clone(l.segs)
	l.segMu.RUnlock()
	if len(segs) > 0 && (len(segs) > 1 || segs[0].base != w) {
		return fmt.Errorf("commitlog: start at %d: the log holds records (first segment %d, written %d)", off, segs[0].base, w)
	}
	if err := l.lowerMark(off); err != nil { // an earlier start: nothing from there on is durable yet
		return l.fail(fmt.Errorf("commitlog: start at %d: %w", off, err))
	}
	l.win.reset(off)
	l.prefillMu.Lock()
	l.waitPrefillChunk()
	defer l.prefillMu.Unlock()
	for _, s := range segs {
		if err := l.removeSegment(s); err != nil {
			return l.fail(fmt.Errorf("commitlog: start at %d: %w", off, err))
		}
	}
	if _, err := l.createSegment(off, false); err != nil {
		return err
	}
	l.written.Store(off)
	l.flushed.Store(off)
	l.pf.writeEnd, l.pf.filled = off, off
	l.prefillAhead.Store(off)
	l.cacheDropped.Store(off)
	l.logger.Info("commitlog: empty log starts at a later offset", "offset", off)
	return nil
}
