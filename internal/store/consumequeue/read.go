package consumequeue

import (
	"errors"
	"io"
	"sync"
)

// readChunkEntries bounds one pread of Get.
const readChunkEntries = 256

var readBufPool = sync.Pool{New: func() any { return new([readChunkEntries * EntrySize]byte) }}

// Topic returns the topic the queue was opened for (Config.Topic).
func (q *Queue) Topic() string { return q.cfg.Topic }

// MinOffset returns the first logical offset still stored.
func (q *Queue) MinOffset() int64 {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.minOffset
}

// MaxOffset returns the next offset to assign (exclusive end).
func (q *Queue) MaxOffset() int64 {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.maxOffset
}

// LastEntry returns the entry at MaxOffset()-1, if the queue has one.
func (q *Queue) LastEntry() (Entry, bool) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	return q.last, q.hasLast
}

// LastPhysEnd returns PhysOffset+Size of the last entry (the end of the
// record it points to, without the CRC trailer), or 0 for an empty queue.
func (q *Queue) LastPhysEnd() int64 {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if !q.hasLast {
		return 0
	}
	return q.last.PhysOffset + int64(q.last.Size)
}

// Get copies up to len(dst) entries starting at queueOffset into dst and
// returns how many it copied: 0 at or past MaxOffset. An offset below
// MinOffset fails with ErrOffsetTooSmall; an invalid stored entry with
// ErrCorrupt.
func (q *Queue) Get(queueOffset int64, dst []Entry) (int, error) {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return 0, ErrClosed
	}
	if queueOffset < q.minOffset {
		return 0, q.errorf("get %d (min %d): %w", queueOffset, q.minOffset, ErrOffsetTooSmall)
	}
	if queueOffset >= q.maxOffset || len(dst) == 0 {
		return 0, nil
	}
	n := int(min(int64(len(dst)), q.maxOffset-queueOffset))
	dst = dst[:n]
	done := 0
	if queueOffset < q.tailBase {
		diskN := int(min(int64(n), q.tailBase-queueOffset))
		if err := q.readDisk(queueOffset, dst[:diskN]); err != nil {
			return 0, err
		}
		done = diskN
	}
	for i := done; i < n; i++ {
		pos := (queueOffset + int64(i) - q.tailBase) * EntrySize
		dst[i] = getEntry(q.tail[pos:])
	}
	for i, e := range dst {
		if !e.valid() || e.isFiller() {
			return 0, q.errorf("entry %d = %+v: %w", queueOffset+int64(i), e, ErrCorrupt)
		}
	}
	return n, nil
}

// readDisk fills dst with the entries at off, off+1, ... from the segment
// files (and the write-behind buffer for the newest). q.mu must be held;
// the range must be stored.
func (q *Queue) readDisk(off int64, dst []Entry) error {
	buf := readBufPool.Get().(*[readChunkEntries * EntrySize]byte)
	defer readBufPool.Put(buf)
	if pf := q.pendingFrom(); off+int64(len(dst)) > pf {
		k := max(pf-off, 0) // entries before the buffer
		for i := k; i < int64(len(dst)); i++ {
			dst[i] = getEntry(q.pend[(off+i-pf)*EntrySize:])
		}
		dst = dst[:k]
	}
	for len(dst) > 0 {
		s := q.segmentFor(off)
		rel := off - s.base
		n := min(int64(len(dst)), readChunkEntries, s.count-rel)
		b := buf[:n*EntrySize]
		if _, err := s.f.ReadAt(b, rel*EntrySize); err != nil && !errors.Is(err, io.EOF) {
			return q.errorf("read %s: %w", s.name, err)
		} else if err != nil {
			return q.errorf("read %s at entry %d: short file: %w", s.name, rel, ErrCorrupt)
		}
		for i := range n {
			dst[i] = getEntry(b[i*EntrySize:])
		}
		dst = dst[n:]
		off += n
	}
	return nil
}

// segmentFor returns the segment holding off, which must be stored.
func (q *Queue) segmentFor(off int64) *segment {
	i := (off - q.segs[0].base) / q.per
	s := q.segs[i]
	if off < s.base || off >= s.base+s.count {
		panic("consumequeue: offset outside its segment") // callers check the bounds
	}
	return s
}

// readLocked returns the stored entry at off (fillers included). q.mu must
// be held.
func (q *Queue) readLocked(off int64) (Entry, error) {
	if q.tail != nil && off >= q.tailBase && off < q.maxOffset {
		return getEntry(q.tail[(off-q.tailBase)*EntrySize:]), nil
	}
	var one [1]Entry
	if err := q.readDisk(off, one[:]); err != nil {
		return Entry{}, err
	}
	return one[0], nil
}

// SearchOffset returns the first offset whose message was stored at or
// after tsMs, by binary search (store times are assumed to grow with the
// offset): MaxOffset when every message is older, MinOffset when every one
// is newer. storeTime reads the store timestamp of the record an entry
// points to; it is called without any lock held.
func (q *Queue) SearchOffset(tsMs int64, storeTime func(Entry) (int64, error)) (int64, error) {
	q.mu.RLock()
	lo, hi := q.minOffset, q.maxOffset
	q.mu.RUnlock()
	var one [1]Entry
	for lo < hi {
		mid := lo + (hi-lo)/2
		n, err := q.Get(mid, one[:])
		if errors.Is(err, ErrOffsetTooSmall) {
			// Retention moved the min past mid: restart from the new min.
			lo = max(lo, q.MinOffset())
			hi = max(hi, lo)
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 { // truncated meanwhile
			hi = mid
			continue
		}
		t, err := storeTime(one[0])
		if err != nil {
			return 0, q.errorf("store time of entry %d: %w", mid, err)
		}
		if t >= tsMs {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, nil
}
