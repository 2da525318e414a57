package consumequeue

import (
	"errors"
	"os"
	"path/filepath"
)

// TruncatePhys removes the newest entries whose PhysOffset is >= physEnd,
// after the CommitLog lost its tail. Entries are cut from the end backwards
// while they point at or past physEnd, so the result stays dense. The cut is
// durable when TruncatePhys returns; MaxOffset moves back and MinOffset
// follows it if needed. A segment emptied by the cut stays as an empty file
// when it is the only one, so that MaxOffset survives a restart.
func (q *Queue) TruncatePhys(physEnd int64) error {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if len(q.segs) == 0 {
		return nil
	}
	if err := q.writePendingLocked(); err != nil {
		return err
	}
	k := q.maxOffset
	for k > q.segs[0].base {
		e, err := q.readLocked(k - 1)
		if err != nil {
			return err
		}
		if e.isFiller() || e.PhysOffset < physEnd {
			break
		}
		k--
	}
	if k == q.maxOffset {
		return nil
	}
	q.log.Warn("consumequeue: truncating entries past the CommitLog end",
		"phys_end", physEnd, "from_offset", k, "max_offset", q.maxOffset)
	if err := q.cutAt(k); err != nil {
		return err
	}
	q.maxOffset = k
	q.minOffset = min(q.minOffset, k)
	if k < q.tailBase {
		q.tail, q.tailBase = q.tail[:0], k
	} else if q.tail != nil {
		q.tail = q.tail[:(k-q.tailBase)*EntrySize]
	}
	return q.reloadLast()
}

// cutAt durably removes the entries from queue offset k on. q.mu and
// q.flushMu must be held.
func (q *Queue) cutAt(k int64) error {
	removed := false
	for i := len(q.segs) - 1; i >= 0; i-- {
		s := q.segs[i]
		switch {
		case s.base > k || (s.base == k && i > 0):
			_ = s.f.Close()
			if err := q.cfg.FS.Remove(q.path(s.name)); err != nil {
				return q.errorf("remove %s: %w", s.name, err)
			}
			q.segs = q.segs[:i]
			removed = true
		case s.base+s.count > k:
			if err := q.truncateSegment(s, k-s.base); err != nil {
				return err
			}
		}
	}
	if removed {
		q.dirGen++
		if err := q.cfg.FS.SyncDir(q.cfg.Dir); err != nil {
			return q.errorf("sync dir: %w", err)
		}
		q.dirSynced = q.dirGen
	}
	return nil
}

// DeleteBeforePhys applies CommitLog retention: it removes the oldest
// segments whose last entry points below minPhys (never the newest segment,
// which keeps MaxOffset) and moves MinOffset to the first entry pointing at
// or past minPhys. After a restart MinOffset is the first stored entry
// again; calling DeleteBeforePhys with the CommitLog's min offset during
// recovery derives the same MinOffset.
func (q *Queue) DeleteBeforePhys(minPhys int64) (removedSegments int, err error) {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, ErrClosed
	}
	for len(q.segs) > 1 {
		s := q.segs[0]
		e, err := q.readLocked(s.base + s.count - 1)
		if err != nil {
			return removedSegments, err
		}
		if !e.isFiller() && e.PhysOffset >= minPhys {
			break
		}
		_ = s.f.Close()
		if err := q.cfg.FS.Remove(q.path(s.name)); err != nil {
			return removedSegments, q.errorf("remove %s: %w", s.name, err)
		}
		q.segs = q.segs[1:]
		q.dirGen++
		removedSegments++
		q.minOffset = max(q.minOffset, q.segs[0].base)
	}
	if removedSegments > 0 {
		q.log.Info("consumequeue: removed old segments", "count", removedSegments, "min_phys", minPhys)
		if err := q.cfg.FS.SyncDir(q.cfg.Dir); err != nil {
			return removedSegments, q.errorf("sync dir: %w", err)
		}
		q.dirSynced = q.dirGen
	}
	return removedSegments, q.advanceMin(minPhys)
}

// advanceMin moves minOffset within the first segment to the first entry
// pointing at or past minPhys (or the segment's end). q.mu must be held.
func (q *Queue) advanceMin(minPhys int64) error {
	if len(q.segs) == 0 {
		return nil
	}
	s := q.segs[0]
	end := s.base + s.count
	var buf [readChunkEntries]Entry
	for q.minOffset < end {
		n := min(int64(len(buf)), end-q.minOffset)
		if err := q.readDisk(q.minOffset, buf[:n]); err != nil {
			return err
		}
		for _, e := range buf[:n] {
			if !e.isFiller() && e.PhysOffset >= minPhys {
				return nil
			}
			q.minOffset++
		}
	}
	return nil
}

// Close flushes and closes the queue. It is idempotent; after it every
// method returns ErrClosed.
func (q *Queue) Close() error {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	q.mu.RLock()
	closed := q.closed
	q.mu.RUnlock()
	if closed {
		return nil
	}
	err := q.flushLocked()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.closeFiles()
	q.segs, q.tail, q.pend = nil, nil, nil
	return err
}

// Destroy closes the queue and removes its files and directory (topic
// deletion). The removal is durable when Destroy returns.
func (q *Queue) Destroy() error {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.closeFiles()
	q.segs, q.tail, q.pend = nil, nil, nil
	fs := q.cfg.FS
	names, err := fs.List(q.cfg.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return q.errorf("list: %w", err)
	}
	for _, name := range names {
		if err := fs.Remove(q.path(name)); err != nil {
			return q.errorf("remove %s: %w", name, err)
		}
	}
	if err := fs.Remove(q.cfg.Dir); err != nil {
		return q.errorf("remove dir: %w", err)
	}
	if err := fs.SyncDir(filepath.Dir(filepath.Clean(q.cfg.Dir))); err != nil {
		return q.errorf("sync parent dir: %w", err)
	}
	return nil
}
