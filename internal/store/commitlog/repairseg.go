package commitlog

import (
	"fmt"
)

// RepairSegment repairs the corrupt entries of the segment holding off
// that lie before limit, the offset from which Recover verified the log
// (every entry from limit on is valid): Recover does not reach them, so a
// record found corrupt there by a read or the scrubber would otherwise
// stay in the log. Each is repaired as Recover's Repair does (see
// "Repair" in the package documentation): its bytes up to the next
// trusted entry are copied durably to dir and replaced by a hole record,
// or, when no valid entry follows in the segment, the rest of it by a
// blank marker. The segment is verified from its start, so only an entry
// where the chain of valid entries breaks is repaired, never an offset
// inside a valid record. It returns the repairs, in log order. It must
// run after Recover and before the log is written to.
func (l *Log) RepairSegment(off, limit int64, dir string) ([]*CorruptionError, error) {
	l.segMu.RLock()
	segs := append([]*segment(nil), l.segs...)
	l.segMu.RUnlock()
	i := -1
	for j, s := range segs {
		if s.base == l.SegmentStart(off) {
			i = j
		}
	}
	if i < 0 {
		return nil, nil // removed by retention
	}
	s := segs[i]
	var res RecoverResult
	for pos := int64(0); ; {
		size, err := s.f.Size()
		if err != nil {
			return res.Repaired, fmt.Errorf("commitlog: size of %s: %w", s.path, err)
		}
		sc, err := scanSegmentFrom(s.f, pos, size, l.cfg.SegmentBytes, l.cfg.CheckRecord, nil)
		if err != nil {
			return res.Repaired, fmt.Errorf("commitlog: scan %s: %w", s.path, err)
		}
		if sc.sealed || sc.invalid == "" || s.base+sc.end >= limit {
			return res.Repaired, nil
		}
		next, err := l.nextValid(segs, i, sc.end)
		if err != nil {
			return res.Repaired, err
		}
		if next < 0 {
			// Recover found a valid log from limit on, so a valid entry
			// follows; not finding one means the log changed under us.
			return res.Repaired, fmt.Errorf("commitlog: repair %s at %d: no valid entry follows the damage", s.path, sc.end)
		}
		ce := &CorruptionError{Segment: s.path, Offset: s.base + sc.end, Position: sc.end, NextValid: next, Reason: sc.invalid}
		if err := l.repair(s, size, sc.end, ce, dir, &res); err != nil {
			return res.Repaired, err
		}
		pos = sc.end // verify the repaired entry and go on from there
	}
}
