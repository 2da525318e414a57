package commitlog

import "fmt"

// Prefill: an fdatasync after an append that grew the file must also commit
// the file's new size and block allocation (a filesystem journal commit);
// after an overwrite of blocks already allocated and synced it writes only
// the data. On ext4 that is about a third less time per small synchronous
// write (BenchmarkSyncedWrite on the machine of docs/benchmarks.md: 1,100
// bytes + fdatasync 178-181 µs appending, 120-128 µs overwriting). So, when enabled
// (Config.PrefillBytes), a prefiller goroutine keeps the segment being
// written zero-filled and synced up to PrefillBytes ahead of the writer, in
// prefillChunkBytes steps, while the flushes are small (averaging at most
// prefillMaxFlushBytes: with large flushes the size update is a small part
// of each fdatasync and zero-filling would only double the bytes written),
// stopping prefillMargin short of the segment end.
//
// Zeros past the written offset are not records: recovery cuts a tail of
// zeros after the last valid entry (Recover, see doc.go), and a clean Close
// (TrimPrefill) cuts them first, so a cleanly closed segment file still ends
// at the written offset. The prefiller never writes below the end of the
// writer's current write: a write that overlaps the chunk being zeroed
// waits for it (only possible when the writer outran the whole window).

const (
	prefillChunkBytes    = 1 << 20
	prefillMaxFlushBytes = 256 << 10
)

// prefillState is guarded by Log.prefillMu.
type prefillState struct {
	writeEnd       int64 // end of the writer's current or last write
	filled         int64 // zero-filled and synced up to here (in the segment of writeEnd, if >= writeEnd)
	zeroLo, zeroHi int64 // range being zeroed, if zeroHi > 0
	// inFlight: a chunk is being zeroed or synced. Whatever removes or
	// cuts the segment (Truncate, StartAt, forgetPrefill) waits for it to
	// end: the fdatasync of a file closed under it would fail the log, and
	// its end would mark zeros past the cut as filled.
	inFlight         bool
	avgFlushBytes    float64
	disabledNoSpace  bool
	waitingForZeroes int
}

// beginWrite announces a write of [off, end) and waits while it overlaps the
// chunk being zeroed.
func (l *Log) beginWrite(off, end int64) {
	if l.cfg.PrefillBytes <= 0 {
		return
	}
	l.prefillMu.Lock()
	for l.pf.zeroHi > off && l.pf.zeroLo < end {
		l.pf.waitingForZeroes++
		l.prefillCond.Wait()
		l.pf.waitingForZeroes--
	}
	l.pf.writeEnd = max(l.pf.writeEnd, end)
	l.prefillMu.Unlock()
}

// afterWrite wakes the prefiller when the zero-filled room ahead of the
// written offset end fell below half the window.
func (l *Log) afterWrite(end int64) {
	if l.cfg.PrefillBytes <= 0 || l.prefillAhead.Load()-end >= l.cfg.PrefillBytes/2 {
		return
	}
	select {
	case l.prefillKick <- struct{}{}:
	default:
	}
}

// noteFlushSize feeds the average flush size that decides whether
// prefilling pays.
func (l *Log) noteFlushSize(bytes int64) {
	if l.cfg.PrefillBytes <= 0 {
		return
	}
	l.prefillMu.Lock()
	l.pf.avgFlushBytes = 0.9*l.pf.avgFlushBytes + 0.1*float64(bytes)
	l.prefillMu.Unlock()
}

// forgetPrefill is called by the writer after it cut the last segment back
// to off (a write refused for lack of space): nothing past off is zero-filled
// any more, and prefilling stops until a write succeeds again.
func (l *Log) forgetPrefill(off int64) {
	if l.cfg.PrefillBytes <= 0 {
		return
	}
	l.prefillMu.Lock()
	l.waitPrefillChunk() // let a chunk in flight land before the cut
	l.pf.filled = min(l.pf.filled, off)
	l.pf.writeEnd = off
	l.pf.disabledNoSpace = true
	l.prefillAhead.Store(l.pf.filled)
	l.prefillMu.Unlock()
}

// resumePrefill re-enables prefilling after a successful write.
func (l *Log) resumePrefill() {
	if l.cfg.PrefillBytes <= 0 {
		return
	}
	l.prefillMu.Lock()
	l.pf.disabledNoSpace = false
	l.prefillMu.Unlock()
}

// RunPrefiller runs the prefiller until stop is closed (only one may run;
// a no-op unless Config.PrefillBytes > 0). A failed fdatasync fails the log
// like any other; a write refused for lack of space only stops prefilling
// until the writer succeeds again.
func (l *Log) RunPrefiller(stop <-chan struct{}) {
	if l.cfg.PrefillBytes <= 0 {
		return
	}
	zeros := make([]byte, prefillChunkBytes)
	for {
		select {
		case <-stop:
			return
		case <-l.prefillKick:
		}
		for l.prefillOnce(zeros) {
			select {
			case <-stop:
				return
			default:
			}
		}
	}
}

// prefillOnce zero-fills and syncs the next chunk ahead of the writer; it
// reports whether there may be more to do.
func (l *Log) prefillOnce(zeros []byte) bool {
	if l.Err() != nil {
		return false
	}
	l.prefillMu.Lock()
	w := l.pf.writeEnd
	segStart := l.SegmentStart(w)
	segEnd := segStart + l.cfg.SegmentBytes
	lo := w
	if l.pf.filled > w && l.SegmentStart(l.pf.filled-1) == segStart {
		lo = l.pf.filled
	}
	hi := min(lo+int64(len(zeros)), w+l.cfg.PrefillBytes, segEnd-l.prefillMargin())
	idle := l.pf.disabledNoSpace || l.pf.avgFlushBytes > prefillMaxFlushBytes || hi <= lo
	var s *segment
	if !idle {
		l.segMu.RLock()
		s = l.segmentLocked(segStart)
		l.segMu.RUnlock()
		idle = s == nil // the writer has not created the segment yet
	}
	if idle {
		l.prefillMu.Unlock()
		return false
	}
	l.pf.zeroLo, l.pf.zeroHi = lo, hi
	l.pf.inFlight = true
	l.prefillMu.Unlock()

	_, err := s.f.WriteAt(zeros[:hi-lo], lo-s.base)
	// Writes may go over the zeros from here on (a later write wins in the
	// page cache): only the zero write itself must not race them, never
	// the fdatasync, which a slow disk can hold for long.
	l.prefillMu.Lock()
	l.pf.zeroLo, l.pf.zeroHi = 0, 0
	l.prefillCond.Broadcast()
	l.prefillMu.Unlock()
	if err == nil {
		err = l.syncSegment(s, fmt.Sprintf(" after zero-filling [%d, %d)", lo-s.base, hi-s.base))
	}

	l.prefillMu.Lock()
	l.pf.inFlight = false
	l.prefillCond.Broadcast()
	if err == nil {
		l.pf.filled = hi
		l.prefillAhead.Store(hi)
	} else if IsNoSpace(err) {
		l.pf.disabledNoSpace = true
		l.logger.Debug("commitlog: zero-filling ahead stopped: disk full", "segment", s.path, "err", err)
	} else if l.Err() == nil {
		l.fail(fmt.Errorf("commitlog: zero-fill %s at %d: %w", s.path, lo-s.base, err))
	}
	l.prefillMu.Unlock()
	return err == nil
}

// waitPrefillChunk waits, with prefillMu held, until no chunk is being
// zeroed or synced.
func (l *Log) waitPrefillChunk() {
	for l.pf.inFlight {
		l.prefillCond.Wait()
	}
}

// prefillMargin is how far before the end of a segment zero-filling stops:
// room for the largest record with its trailer and a blank marker. A write
// that closes a segment then always extends the file, so a full disk
// refuses it (retryably, nothing of the batch written) before the batch goes
// on to the next segment. Over zeros it would succeed, the next segment's
// write would fail with records of the batch already published, and the log
// would have to fail (see Append).
func (l *Log) prefillMargin() int64 {
	if l.cfg.MaxRecordBytes > 0 {
		return l.cfg.MaxRecordBytes + TrailerBytes + BlankBytes
	}
	return l.cfg.SegmentBytes / 2
}

// TrimPrefill cuts the zeros past the written offset from the last segment
// and syncs it, so that a cleanly closed log ends where its records end.
// The prefiller must have stopped; no write may run concurrently.
func (l *Log) TrimPrefill() error {
	if l.cfg.PrefillBytes <= 0 || l.Err() != nil {
		return l.Err()
	}
	w := l.written.Load()
	l.segMu.RLock()
	s := l.segmentLocked(l.SegmentStart(w))
	l.segMu.RUnlock()
	if s == nil {
		return nil
	}
	size, err := s.f.Size()
	if err != nil {
		return fmt.Errorf("commitlog: size of %s: %w", s.path, err)
	}
	if size <= w-s.base {
		return nil
	}
	if err := s.f.Truncate(w - s.base); err != nil {
		return l.fail(fmt.Errorf("commitlog: cut zero-filled tail of %s at %d: %w", s.path, w-s.base, err))
	}
	if err := s.f.Sync(); err != nil {
		return l.fail(fmt.Errorf("commitlog: fdatasync %s: %w", s.path, err))
	}
	l.prefillMu.Lock()
	l.pf.filled = w
	l.prefillAhead.Store(w)
	l.prefillMu.Unlock()
	return nil
}
