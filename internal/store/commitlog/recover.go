package commitlog

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// RecoverOptions tells Recover where to start and what to do with
// corruption in the middle of the log.
type RecoverOptions struct {
	// From is the lowest offset that is not known to be verified and
	// durable (the checkpointed flushed offset); the scan starts at the
	// start of its segment. 0 verifies the whole log.
	From int64
	// Repair isolates corruption in the middle of the log (see the package
	// documentation) instead of failing.
	Repair bool
	// QuarantineDir receives, durably and before any change, every byte
	// Recover removes from the log: a torn tail (unless it is all zeros),
	// an unsynced tail, the damaged bytes Repair replaces. Empty: a torn
	// tail is cut without a copy (tests of this package only).
	QuarantineDir string
	// MustReach is the lowest end the log may have after recovery: the
	// checkpointed flushed offset, 0 when unknown; Recover raises it to the
	// flushed mark (mark.go). A cut below it would remove durable data:
	// Recover then changes nothing and returns a *MissingError, unless
	// Repair is set.
	MustReach int64
	// Crashed says the previous run did not shut down cleanly. Then an
	// invalid entry in the last segment at or after DurableFrom is a torn
	// tail even if valid-looking entries follow it: those bytes were never
	// covered by a completed fdatasync (which covers a prefix of the file),
	// and the page cache may have written them back in any order before the
	// power failed. They are copied to QuarantineDir before the cut.
	Crashed bool
	// DurableFrom is the lowest offset not known to be durable: the
	// checkpointed flushed offset; math.MaxInt64 when unknown. Recover
	// raises it to the flushed mark (or takes the mark when unknown); an
	// invalid entry below it is corruption even after a crash. Unknown
	// with no valid mark turns the exception off.
	DurableFrom int64
	// Resume, if > 0 and not after From, is where verification starts
	// instead of the start of From's segment: a segment start, or the
	// start of an entry known from elsewhere (a ConsumeQueue entry), in
	// any segment up to From's. The entries before it are left to be
	// verified when read. Inside a segment the fast path is taken only if
	// the entry at Resume names Resume as its offset and every entry from
	// there to the end of the log is valid, but for a tail of zeros in the
	// last segment (cut, as the full scan would); otherwise Recover
	// discards what it saw and scans again from the start of Resume's
	// segment, deciding everything as without Resume. A wrong Resume
	// therefore costs time, never data. A Resume before the first segment
	// verifies the whole log.
	Resume int64
}

// RecoverResult describes what Recover found and did.
type RecoverResult struct {
	End             int64 // the written (and flushed) offset after recovery
	ScannedFrom     int64 // where verification started (the start of a segment, or Resume)
	Records         int   // valid records verified
	TornBytes       int64 // bytes cut from the tail
	TornAt          int64 // offset of the cut (valid if TornBytes > 0 or RemovedSegments)
	TornReason      string
	RemovedSegments []string           // segment files removed after a torn tail
	Repaired        []*CorruptionError // corruption isolated by Repair
	Quarantined     int64              // bytes of an unsynced tail copied to quarantine before the cut
	ZeroTailBytes   int64              // zero-filled bytes (see prefill.go) cut after the last record
	UnsyncedBytes   int64              // bytes cut as an unsynced tail written back out of order (in quarantine)
	Mark            Mark               // the flushed mark found (mark.go)
	DurableFrom     int64              // the durable offset used: RecoverOptions.DurableFrom raised to the mark
}

// CorruptionError reports an invalid entry in the middle of the log: valid
// entries exist after it.
type CorruptionError struct {
	Segment   string // segment file path
	Offset    int64  // CommitLog offset of the invalid entry
	Position  int64  // its position in the segment file
	NextValid int64  // CommitLog offset of the next valid entry found
	Reason    string
}

func (e *CorruptionError) Error() string {
	return fmt.Sprintf("commitlog: corrupt entry in the middle of the log at offset %d (segment %s, position %d): %s; a valid entry follows at offset %d",
		e.Offset, e.Segment, e.Position, e.Reason, e.NextValid)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptionError) Is(target error) bool { return target == ErrCorrupt }

// MissingError reports an invalid entry with nothing valid after it (what
// a torn tail looks like) before RecoverOptions.MustReach: cutting there
// would remove durable data. Recover changed nothing.
type MissingError struct {
	Segment   string // segment file path
	Offset    int64  // CommitLog offset of the invalid entry, where a cut would end the log
	Position  int64  // its position in the segment file
	MustReach int64
	Reason    string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("commitlog: invalid entry at offset %d (segment %s, position %d): %s; nothing valid follows, but the log must reach %d (fdatasynced before the previous run stopped: the checkpointed flushed offset or the flushed mark): durable data is missing",
		e.Offset, e.Segment, e.Position, e.Reason, e.MustReach)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *MissingError) Is(target error) bool { return target == ErrCorrupt }

// physOffsetEnd is the end of a stored record's PHYSICALOFFSET field.
const physOffsetEnd = 36

// Recover verifies the log from opts.From to its end, cuts a torn tail,
// reports (or with Repair isolates) corruption in the middle, makes the
// result durable and sets the written and flushed offsets. See the package
// documentation for the exact rules. It must run once, before Append.
func (l *Log) Recover(opts RecoverOptions) (RecoverResult, error) {
	m := l.applyMark(&opts)
	res, err := l.recoverLog(opts)
	res.Mark, res.DurableFrom = m, opts.DurableFrom
	return res, err
}

// applyMark reads the flushed mark and raises opts.DurableFrom and
// opts.MustReach to it: every byte below it was fdatasynced before the
// previous run stopped. A missing mark (a log an earlier release wrote)
// or an invalid one leaves the options as the caller set them.
func (l *Log) applyMark(opts *RecoverOptions) Mark {
	m, err := ReadMark(l.cfg.FS, l.cfg.Dir)
	switch {
	case err != nil:
		l.logger.Warn("commitlog: flushed mark unreadable; recovery relies on the caller's durable offset alone", "err", err)
	case m.Invalid != "":
		l.logger.Warn("commitlog: flushed mark invalid; recovery relies on the caller's durable offset alone", "reason", m.Invalid)
	}
	if !m.Found {
		return m
	}
	l.markAt = m.Offset
	opts.DurableFrom = raiseDurable(opts.DurableFrom, m)
	opts.MustReach = max(opts.MustReach, m.Offset)
	return m
}

// raiseDurable is the durable offset known from the caller's (d,
// math.MaxInt64 when unknown) and the mark m: the higher of the two, or
// the mark alone when the caller knows none.
func raiseDurable(d int64, m Mark) int64 {
	switch {
	case !m.Found:
		return d
	case d == math.MaxInt64:
		return m.Offset
	}
	return max(d, m.Offset)
}

func (l *Log) recoverLog(opts RecoverOptions) (RecoverResult, error) {
	l.segMu.RLock()
	segs := append([]*segment(nil), l.segs...)
	l.segMu.RUnlock()
	if len(segs) == 0 {
		if err := l.recoveredMark(0); err != nil {
			return RecoverResult{}, err
		}
		l.setRecovered(0)
		return RecoverResult{}, nil
	}
	i := l.startIndex(segs, opts.From)
	if r := opts.Resume; r > 0 && r <= opts.From {
		i = l.startIndex(segs, r)
	}
	base := segs[i].base
	if r := opts.Resume; r > base && r <= opts.From && r < base+l.cfg.SegmentBytes {
		// The first record must also name r as its own offset, so a Resume
		// that points into the middle of a record cannot start a scan that
		// happens to look valid.
		atResume := false
		first := func(pos int64, rec []byte) {
			if pos == r-base && len(rec) >= physOffsetEnd {
				atResume = message.View(rec).PhysOffset() == r
			}
		}
		res := RecoverResult{ScannedFrom: r}
		end, zt, err := l.scan(segs, i, r-base, nil, first, &res)
		if err != nil {
			return res, err
		}
		if zt != nil && atResume && segs[zt.seg].base+zt.pos >= opts.MustReach {
			end = segs[zt.seg].base + zt.pos
			if err := l.cutTail(segs, zt.seg, zt.size, zt.pos, zt.reason, l.cfg.PrefillBytes > 0, "", &res); err != nil {
				return res, err
			}
		}
		if end >= 0 && atResume {
			return res, l.finishRecover(base, end, &res)
		}
		l.logger.Info("commitlog: no valid log from the resume point on; verifying from the start of its segment",
			"resume", r, "segment", segs[i].path, "record_at_resume", atResume)
	}
	res := RecoverResult{ScannedFrom: base}
	end, _, err := l.scan(segs, i, 0, &opts, nil, &res)
	if err != nil {
		return res, err
	}
	return res, l.finishRecover(base, end, &res)
}

// zeroTail is where a look-only scan stopped when the last segment holds
// only zeros from there on: the prefilled room ahead of the writer (see
// prefill.go) or a zero-filled tail left by a crash. A full scan would cut
// the log there (no valid entry follows), so the fast path may too.
type zeroTail struct {
	seg       int
	size, pos int64
	reason    string
}

// scan verifies segs[i:] from position pos of segs[i], calling visit for
// each valid record of segs[i], and returns the end of the log. With opts ==
// nil it only looks and changes nothing: at the first invalid entry it
// returns -1, and the zero tail if that is what it found. Otherwise invalid
// entries are resolved (see resolveInvalid).
func (l *Log) scan(segs []*segment, i int, pos int64, opts *RecoverOptions, visit func(pos int64, rec []byte), res *RecoverResult) (int64, *zeroTail, error) {
	end := int64(-1)
	for i < len(segs) && end < 0 {
		s, last := segs[i], i == len(segs)-1
		size, err := s.f.Size()
		if err != nil {
			return -1, nil, fmt.Errorf("commitlog: size of %s: %w", s.path, err)
		}
		sc, err := scanSegmentFrom(s.f, pos, size, l.cfg.SegmentBytes, l.cfg.CheckRecord, visit)
		if err != nil {
			return -1, nil, fmt.Errorf("commitlog: scan %s: %w", s.path, err)
		}
		res.Records += sc.records
		switch {
		case sc.sealed && last:
			end = s.base + l.cfg.SegmentBytes
		case sc.invalid == "" && last:
			end = s.base + sc.end
		case sc.sealed:
		case opts == nil:
			return -1, l.zeroTailAt(segs, i, size, sc), nil
		default:
			reason := sc.invalid
			if reason == "" {
				reason = "segment ends without an end marker but a later segment exists"
			}
			e, err := l.resolveInvalid(segs, i, size, sc.end, reason, *opts, res)
			if err != nil {
				return -1, nil, err
			}
			if e == rescan {
				// Repaired: the segment now holds a hole record or a blank
				// marker at sc.end; verify it and go on from there.
				pos, visit = sc.end, nil
				continue
			}
			end = e
		}
		i, pos, visit = i+1, 0, nil
	}
	return end, nil, nil
}

// zeroTailAt returns the zero tail a look-only scan stopped at in segs[i],
// or nil if it stopped at anything else (an I/O error counts as anything
// else: the full scan will report it).
func (l *Log) zeroTailAt(segs []*segment, i int, size int64, sc segScan) *zeroTail {
	if i != len(segs)-1 {
		return nil
	}
	if zeros, err := allZero(segs[i].f, sc.end, size); err != nil || !zeros {
		return nil
	}
	return &zeroTail{seg: i, size: size, pos: sc.end, reason: sc.invalid}
}

// rescan is what resolveInvalid returns after a repair: scan the segment
// again from the repaired position.
const rescan = -2

// finishRecover makes the segments from base on durable and sets the
// written and flushed offsets to end.
func (l *Log) finishRecover(base, end int64, res *RecoverResult) error {
	if err := l.syncFrom(base); err != nil {
		return err
	}
	if err := l.recoveredMark(end); err != nil {
		return err
	}
	res.End = end
	l.setRecovered(end)
	return nil
}

func (l *Log) startIndex(segs []*segment, from int64) int {
	for i := len(segs) - 1; i > 0; i-- {
		if segs[i].base <= from {
			return i
		}
	}
	return 0
}

func (l *Log) setRecovered(end int64) {
	l.win.reset(end) // starts empty, whatever was read or repaired before
	l.written.Store(end)
	l.flushed.Store(end)
	l.recovered = true
	l.prefillMu.Lock()
	l.pf.writeEnd, l.pf.filled = end, end // the prefiller starts after the last record
	l.prefillAhead.Store(end)
	l.prefillMu.Unlock()
}

// resolveInvalid handles an invalid entry at position rel of segs[i]: a
// torn tail is cut (returning the new end); corruption in the middle is an
// error unless repaired (returning -1 to continue the scan, or the new end
// if segs[i] is the last segment).
func (l *Log) resolveInvalid(segs []*segment, i int, size, rel int64, reason string, opts RecoverOptions, res *RecoverResult) (int64, error) {
	s := segs[i]
	if i == len(segs)-1 && l.cfg.PrefillBytes > 0 {
		zeros, err := allZero(s.f, rel, size)
		if err != nil {
			return 0, fmt.Errorf("commitlog: read tail of %s: %w", s.path, err)
		}
		if zeros { // the zero-filled room ahead of the writer: no entry follows
			if err := l.checkReach(s, rel, reason, opts); err != nil {
				return 0, err
			}
			return s.base + rel, l.cutTail(segs, i, size, rel, reason, true, "", res)
		}
	}
	next, err := l.nextValid(segs, i, rel)
	if err != nil {
		return 0, err
	}
	if next < 0 {
		if err := l.checkReach(s, rel, reason, opts); err != nil {
			return 0, err
		}
		return s.base + rel, l.cutTail(segs, i, size, rel, reason, false, opts.QuarantineDir, res)
	}
	if opts.Crashed && i == len(segs)-1 && opts.DurableFrom != math.MaxInt64 {
		if s.base+rel >= opts.DurableFrom {
			return s.base + rel, l.cutUnsyncedTail(s, size, rel, next, reason, opts, res)
		}
		// Below the durable offset an fdatasync covered these bytes before
		// the crash: a torn write cannot explain them.
		reason += fmt.Sprintf(" (the log below %d was fdatasynced before the crash: damage to durable data, not an unsynced tail)", opts.DurableFrom)
		l.logger.Error("commitlog: invalid entry in data fdatasynced before the crash; not cutting it as an unsynced tail",
			"segment", s.path, "offset", s.base+rel, "durable_from", opts.DurableFrom, "next_valid", next, "repair", opts.Repair)
	}
	ce := &CorruptionError{Segment: s.path, Offset: s.base + rel, Position: rel, NextValid: next, Reason: reason}
	if !opts.Repair {
		return 0, ce
	}
	return rescan, l.repair(s, size, rel, ce, opts.QuarantineDir, res)
}

// repair replaces the damaged bytes at position rel of s, up to the next
// valid entry ce.NextValid, by a hole record (the rest of the segment by a
// blank marker if that entry lies in a later segment), keeping the
// originals in quarantine.
func (l *Log) repair(s *segment, size, rel int64, ce *CorruptionError, dir string, res *RecoverResult) error {
	next, err := l.trustedNext(s, size, rel, ce.NextValid-s.base)
	if err != nil {
		return err
	}
	path, err := l.repairHole(s, size, rel, next, dir)
	if err != nil {
		return err
	}
	kept := "a hole record; the records after it are kept"
	lost := next - rel
	if next < 0 {
		kept, lost = "a blank marker closing the segment (no valid entry follows in it)", size-rel
	}
	l.logger.Error("commitlog: corrupt bytes replaced by "+kept+"; the originals are in quarantine",
		"segment", s.path, "offset", ce.Offset, "bytes", lost, "reason", ce.Reason, "next_valid", ce.NextValid, "quarantine", path)
	res.Repaired = append(res.Repaired, ce)
	res.Quarantined += lost
	return nil
}

// trustedNext returns the position in s of the entry a repair of the
// damage at rel may resume at, starting from the next valid entry q (-1 if
// it lies in a later segment): one that is at least MinHoleBytes after rel
// (an entry inside the damaged one's header cannot be real) and is a blank
// marker, a hole record or a record naming its own offset, so that bytes
// inside a damaged record (a message body that holds a well-formed entry,
// say) are never taken for a record. It returns -1 if there is none in s.
func (l *Log) trustedNext(s *segment, size, rel, q int64) (int64, error) {
	for q >= 0 && q < l.cfg.SegmentBytes {
		if q-rel >= MinHoleBytes {
			ok, err := namesItself(s, q)
			if err != nil || ok {
				return q, err
			}
		}
		next, err := findValid(s.f, max(q+1, rel+MinHoleBytes), size, l.cfg.SegmentBytes)
		if err != nil {
			return -1, fmt.Errorf("commitlog: scan %s: %w", s.path, err)
		}
		q = next
	}
	return -1, nil
}

// namesItself reports whether the valid entry at position q of s is a
// blank marker, a hole record, or a record whose PHYSICALOFFSET field is
// its CommitLog offset.
func namesItself(s *segment, q int64) (bool, error) {
	var h [physOffsetEnd]byte
	n, err := s.f.ReadAt(h[:], q)
	if n < headerBytes {
		return false, fmt.Errorf("commitlog: read %s at %d: %w", s.path, q, cmp.Or(err, io.ErrUnexpectedEOF))
	}
	switch int32(be32(h[4:8])) {
	case message.MagicBlank, MagicHole:
		return true, nil
	}
	return n == physOffsetEnd && message.View(h[:]).PhysOffset() == s.base+q, nil
}

// checkReach refuses a cut at position rel of s below opts.MustReach
// (unless Repair is set, which logs it).
func (l *Log) checkReach(s *segment, rel int64, reason string, opts RecoverOptions) error {
	if s.base+rel >= opts.MustReach {
		return nil
	}
	me := &MissingError{Segment: s.path, Offset: s.base + rel, Position: rel, MustReach: opts.MustReach, Reason: reason}
	if !opts.Repair {
		return me
	}
	l.logger.Error("commitlog: cutting the log before the checkpointed flushed offset because repair is on; the cut bytes go to quarantine",
		"err", me, "quarantine", opts.QuarantineDir)
	return nil
}

// nextValid looks for a valid entry after position rel of segs[i], in that
// segment or any later one. It returns its CommitLog offset or -1.
func (l *Log) nextValid(segs []*segment, i int, rel int64) (int64, error) {
	for j := i; j < len(segs); j++ {
		s := segs[j]
		size, err := s.f.Size()
		if err != nil {
			return -1, fmt.Errorf("commitlog: size of %s: %w", s.path, err)
		}
		from := int64(0)
		if j == i {
			from = rel + 1
		}
		q, err := findValid(s.f, from, size, l.cfg.SegmentBytes)
		if err != nil {
			return -1, fmt.Errorf("commitlog: scan %s: %w", s.path, err)
		}
		if q >= 0 {
			return s.base + q, nil
		}
	}
	return -1, nil
}

// cutUnsyncedTail handles an invalid entry followed by valid-looking ones in
// the part of the last segment that no completed fdatasync covered: the
// bytes are kept in quarantine for inspection, then the tail is cut.
func (l *Log) cutUnsyncedTail(s *segment, size, rel, next int64, reason string, opts RecoverOptions, res *RecoverResult) error {
	if opts.QuarantineDir == "" {
		return errors.New("commitlog: cutting an unsynced tail needs a quarantine directory")
	}
	if _, err := l.copyOut(s, rel, size, opts.QuarantineDir, "unsynced"); err != nil {
		return err
	}
	l.logger.Warn("commitlog: entries after the last durable offset were written back out of order; moved them to quarantine",
		"segment", s.path, "offset", s.base+rel, "durable_from", opts.DurableFrom, "next_valid", next, "quarantine", opts.QuarantineDir)
	res.Quarantined += size - rel
	res.UnsyncedBytes += size - rel
	return l.cutTail([]*segment{s}, 0, size, rel, reason+" (unsynced tail written back out of order)", false, "", res)
}

// cutTail truncates segs[i] at rel and removes the later segment files.
// zeros says the cut bytes are the zero-filled room of a log that prefills
// (counted as such, not as a torn tail). Unless dir is empty, the bytes
// removed are first copied there (keepAside).
func (l *Log) cutTail(segs []*segment, i int, size, rel int64, reason string, zeros bool, dir string, res *RecoverResult) error {
	s := segs[i]
	if dir != "" {
		if err := l.keepAside(segs, i, size, rel, dir, res); err != nil {
			return err
		}
	}
	if zeros {
		// The zero-filled room ahead of the writer (prefill.go), not a
		// torn write: nothing was there.
		res.ZeroTailBytes += size - rel
		l.logger.Debug("commitlog: cutting zero-filled tail", "segment", s.path, "offset", s.base+rel, "bytes", size-rel)
	} else {
		res.TornAt, res.TornReason = s.base+rel, reason
		res.TornBytes += size - rel
		l.logger.Warn("commitlog: cutting torn tail", "segment", s.path, "offset", s.base+rel, "bytes", size-rel, "reason", reason)
	}
	if err := l.lowerMark(s.base + rel); err != nil {
		return err
	}
	for _, later := range segs[i+1:] {
		sz, _ := later.f.Size()
		res.TornBytes += sz
		if err := l.removeSegment(later); err != nil {
			return err
		}
		res.RemovedSegments = append(res.RemovedSegments, later.path)
	}
	if len(segs) > i+1 {
		if err := l.cfg.FS.SyncDir(l.cfg.Dir); err != nil {
			return fmt.Errorf("commitlog: sync dir %s: %w", l.cfg.Dir, err)
		}
	}
	if err := s.f.Truncate(rel); err != nil {
		return fmt.Errorf("commitlog: truncate %s to %d: %w", s.path, rel, err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("commitlog: fdatasync %s: %w", s.path, err)
	}
	return nil
}

// keepAside copies what cutTail is about to remove, [rel, size) of segs[i]
// and every later segment file, to dir, durably; parts that are all zeros
// (never written) are not copied.
func (l *Log) keepAside(segs []*segment, i int, size, rel int64, dir string, res *RecoverResult) error {
	for j, s := range segs[i:] {
		from, to := rel, size
		if j > 0 {
			sz, err := s.f.Size()
			if err != nil {
				return fmt.Errorf("commitlog: size of %s: %w", s.path, err)
			}
			from, to = 0, sz
		}
		zeros, err := allZero(s.f, from, to)
		if err != nil {
			return fmt.Errorf("commitlog: read tail of %s: %w", s.path, err)
		}
		if zeros {
			continue
		}
		if _, err := l.copyOut(s, from, to, dir, "torn"); err != nil {
			return err
		}
		res.Quarantined += to - from
	}
	return nil
}

func (l *Log) removeSegment(s *segment) error {
	l.segMu.Lock()
	for k, x := range l.segs {
		if x == s {
			l.segs = append(l.segs[:k:k], l.segs[k+1:]...)
			break
		}
	}
	l.segMu.Unlock()
	s.f.Close()
	if err := l.cfg.FS.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("commitlog: remove %s: %w", s.path, err)
	}
	return nil
}

// copyOut copies [from, to) of s durably to a new file
// <dir>/<segment>.<from>.<kind> (with a ".N" suffix if that exists: earlier
// evidence is never overwritten) and returns its path.
func (l *Log) copyOut(s *segment, from, to int64, dir, kind string) (string, error) {
	if err := vfs.MkdirAllDurable(l.cfg.FS, dir, 0o700); err != nil {
		return "", fmt.Errorf("commitlog: %w", err)
	}
	name := fmt.Sprintf("%s.%d.%s", filepath.Base(s.path), from, kind)
	path := filepath.Join(dir, name)
	out, err := l.cfg.FS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	for n := 1; errors.Is(err, os.ErrExist) && n < maxQuarantineCopies; n++ {
		path = filepath.Join(dir, fmt.Sprintf("%s.%d", name, n))
		out, err = l.cfg.FS.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	}
	if err != nil {
		return "", fmt.Errorf("commitlog: create %s: %w", path, err)
	}
	defer out.Close()
	buf := make([]byte, min(scanChunkBytes, max(to-from, 1)))
	for off := from; off < to; {
		k := min(int64(len(buf)), to-off)
		if n, err := s.f.ReadAt(buf[:k], off); int64(n) < k {
			return "", fmt.Errorf("commitlog: read %s at %d: %d of %d bytes: %w", s.path, off, n, k, cmp.Or(err, io.ErrUnexpectedEOF))
		}
		if _, err := out.WriteAt(buf[:k], off-from); err != nil {
			return "", fmt.Errorf("commitlog: write %s: %w", path, err)
		}
		off += k
	}
	if err := out.Sync(); err != nil {
		return "", fmt.Errorf("commitlog: fdatasync %s: %w", path, err)
	}
	if err := l.cfg.FS.SyncDir(dir); err != nil {
		return "", fmt.Errorf("commitlog: sync dir %s: %w", dir, err)
	}
	return path, nil
}

// maxQuarantineCopies bounds the copies of one range kept in quarantine.
const maxQuarantineCopies = 1000

// syncFrom makes the segments from base on durable: after a process crash
// their bytes may sit only in the page cache.
func (l *Log) syncFrom(base int64) error {
	l.segMu.RLock()
	live := append([]*segment(nil), l.segs...)
	l.segMu.RUnlock()
	for _, s := range live {
		if s.base < base {
			continue
		}
		if err := s.f.Sync(); err != nil {
			return fmt.Errorf("commitlog: fdatasync %s: %w", s.path, err)
		}
	}
	return nil
}

// allZero reports whether bytes [from, to) of r are all zero.
func allZero(r io.ReaderAt, from, to int64) (bool, error) {
	buf := make([]byte, min(scanChunkBytes, max(to-from, 0)))
	for pos := from; pos < to; {
		k := min(int64(len(buf)), to-pos)
		if _, err := r.ReadAt(buf[:k], pos); err != nil && err != io.EOF {
			return false, err
		}
		for _, b := range buf[:k] {
			if b != 0 {
				return false, nil
			}
		}
		pos += k
	}
	return true, nil
}
