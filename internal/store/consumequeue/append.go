package consumequeue

import (
	"os"
)

// Append stores e at queueOffset, which must equal MaxOffset(): offsets are
// dense. Re-appending an offset below MaxOffset (re-dispatch after a
// restart) succeeds if e equals the stored entry (or the entry was already
// removed by retention) and fails with ErrConflict otherwise. An offset
// above MaxOffset fails with ErrGap, except on a queue holding no live
// entries, which then restarts at queueOffset (a queue rebuilt from a
// CommitLog whose head was deleted).
//
// The entry is visible to Get when Append returns; it reaches the segment
// file (page cache) with the next write-behind batch and is durable after
// Flush. Only one goroutine may call Append.
func (q *Queue) Append(queueOffset int64, e Entry) error {
	if !e.valid() || e.isFiller() {
		return q.errorf("append %d: %+v: %w", queueOffset, e, ErrInvalidEntry)
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	switch {
	case queueOffset < q.maxOffset:
		defer q.mu.Unlock()
		return q.checkStored(queueOffset, e)
	case queueOffset > q.maxOffset && q.minOffset < q.maxOffset:
		defer q.mu.Unlock()
		return q.errorf("append %d, max offset %d: %w", queueOffset, q.maxOffset, ErrGap)
	case queueOffset > q.maxOffset:
		q.mu.Unlock()
		return q.restartAt(queueOffset, e)
	}
	defer q.mu.Unlock()
	return q.appendLocked(e)
}

// checkStored compares e with the stored entry at off (< maxOffset).
func (q *Queue) checkStored(off int64, e Entry) error {
	if len(q.segs) == 0 || off < q.minOffset {
		return nil // retired by retention: nothing to compare with
	}
	stored, err := q.readLocked(off)
	if err != nil {
		return err
	}
	if stored != e {
		return q.errorf("append %d: %+v, stored %+v: %w", off, e, stored, ErrConflict)
	}
	return nil
}

// appendLocked stores e at maxOffset in the write-behind buffer, first
// writing the buffer to the segment if it holds WriteBehindEntries. On an
// error nothing changed (the buffered entries stay buffered). q.mu must be
// held.
func (q *Queue) appendLocked(e Entry) error {
	if len(q.pend) >= q.cfg.WriteBehindEntries*EntrySize {
		if err := q.writePendingLocked(); err != nil {
			return err
		}
	}
	s, err := q.writableSegment()
	if err != nil {
		return err
	}
	var b [EntrySize]byte
	putEntry(b[:], e)
	q.pend = append(q.pend, b[:]...)
	s.count++
	q.cacheEntry(b[:])
	q.maxOffset++
	q.last, q.hasLast = e, true
	return nil
}

// writePendingLocked writes the write-behind buffer to the last segment.
// q.mu must be held (write side).
func (q *Queue) writePendingLocked() error {
	if len(q.pend) == 0 {
		return nil
	}
	s := q.segs[len(q.segs)-1]
	n := int64(len(q.pend) / EntrySize)
	if _, err := s.f.WriteAt(q.pend, (s.count-n)*EntrySize); err != nil {
		return q.errorf("write %s: %w", s.name, err)
	}
	q.pend = q.pend[:0]
	return nil
}

// pendingFrom returns the first queue offset still in the write-behind
// buffer (maxOffset when it is empty). q.mu must be held.
func (q *Queue) pendingFrom() int64 {
	return q.maxOffset - int64(len(q.pend)/EntrySize)
}

// writableSegment returns the segment for maxOffset, creating it when the
// last one is full (after writing the full one's pending entries). q.mu
// must be held.
func (q *Queue) writableSegment() (*segment, error) {
	if n := len(q.segs); n > 0 && q.segs[n-1].count < q.per {
		return q.segs[n-1], nil
	}
	if err := q.writePendingLocked(); err != nil {
		return nil, err
	}
	return q.createSegment(q.maxOffset)
}

// createSegment creates the file for the segment starting at base. Its
// directory entry becomes durable with the next Flush. q.mu must be held.
func (q *Queue) createSegment(base int64) (*segment, error) {
	name := segmentName(base)
	f, err := q.cfg.FS.OpenFile(q.path(name), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, q.errorf("create segment: %w", err)
	}
	s := &segment{base: base, name: name, f: f}
	q.segs = append(q.segs, s)
	q.dirGen++
	return s, nil
}

// cacheEntry adds an encoded entry at maxOffset to the tail cache, dropping
// the oldest half when it holds twice its size. q.mu must be held.
func (q *Queue) cacheEntry(b []byte) {
	limit := q.cfg.TailCacheEntries
	if limit == 0 {
		q.tailBase = q.maxOffset + 1
		return
	}
	if len(q.tail) >= 2*limit*EntrySize {
		drop := len(q.tail)/EntrySize - limit
		q.tail = q.tail[:copy(q.tail, q.tail[drop*EntrySize:])]
		q.tailBase += int64(drop)
	}
	q.tail = append(q.tail, b...)
}

// restartAt starts an empty queue over at off: the old segments, which hold
// only retired entries, are removed and the slots of the new segment before
// off are filled with filler entries, so that recovery finds a dense
// segment.
func (q *Queue) restartAt(off int64, e Entry) error {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	if off <= q.maxOffset || q.minOffset < q.maxOffset {
		panic("consumequeue: queue changed during restart; Append has one caller")
	}
	q.log.Info("consumequeue: restarting empty queue", "offset", off, "max_offset", q.maxOffset)
	q.pend = q.pend[:0] // retired entries of the segments removed below
	for _, s := range q.segs {
		_ = s.f.Close()
		if err := q.cfg.FS.Remove(q.path(s.name)); err != nil {
			return q.errorf("remove %s: %w", s.name, err)
		}
	}
	q.segs = nil
	q.dirGen++
	base := off - off%q.per
	s, err := q.createSegment(base)
	if err != nil {
		return err
	}
	fill := make([]byte, (off-base)*EntrySize)
	for i := 0; i < len(fill); i += EntrySize {
		putEntry(fill[i:], filler)
	}
	if _, err := s.f.WriteAt(fill, 0); err != nil {
		return q.errorf("write %s: %w", s.name, err)
	}
	s.count = off - base
	q.minOffset, q.maxOffset = off, off
	q.tail, q.tailBase = q.tail[:0], off
	q.hasLast = false
	return q.appendLocked(e)
}

// Flush makes every appended entry and every segment creation or removal
// durable (fdatasync of the dirty segments, oldest first, then the
// directory). It runs concurrently with Append and Get. A failed Flush is
// sticky: every later Flush returns the same error, because the page cache
// is undefined after a failed fdatasync.
func (q *Queue) Flush() error {
	q.flushMu.Lock()
	defer q.flushMu.Unlock()
	return q.flushLocked()
}

type flushJob struct {
	s     *segment
	count int64
}

// flushLocked is Flush with q.flushMu held.
func (q *Queue) flushLocked() error {
	if q.flushErr != nil {
		return q.flushErr
	}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	if err := q.writePendingLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	var jobs []flushJob
	for _, s := range q.segs {
		if s.count > s.synced {
			jobs = append(jobs, flushJob{s, s.count})
		}
	}
	dirGen, dirDirty := q.dirGen, q.dirGen != q.dirSynced
	q.mu.Unlock()
	for _, j := range jobs {
		if err := j.s.f.Sync(); err != nil {
			q.flushErr = q.errorf("fdatasync %s: %w", j.s.name, err)
			return q.flushErr
		}
	}
	if dirDirty || len(q.parents) > 0 {
		if err := q.syncDirs(); err != nil {
			q.flushErr = err
			return err
		}
	}
	q.mu.Lock()
	for _, j := range jobs {
		j.s.synced = max(j.s.synced, j.count)
	}
	q.dirSynced = dirGen
	q.mu.Unlock()
	return nil
}

// syncDirs syncs the queue directory and the parents Open created.
func (q *Queue) syncDirs() error {
	for _, d := range append([]string{q.cfg.Dir}, q.parents...) {
		if err := q.cfg.FS.SyncDir(d); err != nil {
			return q.errorf("sync dir %s: %w", d, err)
		}
	}
	q.parents = nil
	return nil
}
