package commitlog

import (
	"fmt"
	"math"
)

// Problem is something Verify found wrong, at a CommitLog offset of a
// segment file.
type Problem struct {
	File   string
	Offset int64
	Msg    string
	// TornTail is set for an invalid tail with no valid entry after it,
	// which recovery cuts; other problems are corruption.
	TornTail bool
}

func (p Problem) String() string { return fmt.Sprintf("%s: offset %d: %s", p.File, p.Offset, p.Msg) }

// Verify scans every segment without changing anything, calling visit for
// each valid record and returning the problems found: invalid entries
// (corruption, or a torn tail), segments that are not closed by an end
// marker although a later segment exists. It returns the end of the valid
// data. On a Log that was not recovered (opened only to be checked), reads
// are allowed up to that end afterwards. The valid hole records it passes
// (left by repairs: not problems) are listed by Holes afterwards.
func (l *Log) Verify(visit func(phys int64, rec []byte)) (int64, []Problem, error) {
	return l.verifyFrom(math.MaxInt64, visit)
}

// VerifyAfterCrash is Verify of a log whose last run crashed, judged as
// Recover judges it: an invalid entry in the last segment at or after the
// durable offset (durableFrom, the checkpointed flushed offset or
// math.MaxInt64 when unknown, raised to the flushed mark) is an unsynced
// tail that
// opening cuts, even when valid entries follow, and is reported as a torn
// tail.
func (l *Log) VerifyAfterCrash(durableFrom int64, visit func(phys int64, rec []byte)) (int64, []Problem, error) {
	if m, err := ReadMark(l.cfg.FS, l.cfg.Dir); err == nil {
		durableFrom = raiseDurable(durableFrom, m)
	}
	return l.verifyFrom(durableFrom, visit)
}

func (l *Log) verifyFrom(unsyncedFrom int64, visit func(phys int64, rec []byte)) (int64, []Problem, error) {
	end, probs, err := l.verify(unsyncedFrom, visit)
	if !l.recovered {
		l.written.Store(end)
	}
	return end, probs, err
}

func (l *Log) verify(unsyncedFrom int64, visit func(phys int64, rec []byte)) (int64, []Problem, error) {
	l.segMu.RLock()
	segs := append([]*segment(nil), l.segs...)
	l.segMu.RUnlock()
	var probs []Problem
	end := int64(0)
	l.holes = nil
	for i := range segs {
		e, p, torn, err := l.verifySegment(segs, i, unsyncedFrom, visit)
		end, probs = e, append(probs, p...)
		if err != nil || torn {
			return end, probs, err
		}
	}
	return end, probs, nil
}

// verifySegment scans segs[i], going on after each corrupt entry at the
// next valid one if that lies in the same segment, so that every record
// that verifies is visited. It returns the end of the valid data and
// whether it ended at a torn tail (nothing valid follows).
func (l *Log) verifySegment(segs []*segment, i int, unsyncedFrom int64, visit func(phys int64, rec []byte)) (end int64, probs []Problem, torn bool, err error) {
	s, last := segs[i], i == len(segs)-1
	size, err := s.f.Size()
	if err != nil {
		return s.base, nil, false, fmt.Errorf("commitlog: size of %s: %w", s.path, err)
	}
	for pos := int64(0); ; {
		sc, err := scanSegmentFrom(s.f, pos, size, l.cfg.SegmentBytes, l.cfg.CheckRecord, func(pos int64, rec []byte) {
			if visit != nil {
				visit(s.base+pos, rec)
			}
		})
		if err != nil {
			return s.base + pos, probs, false, fmt.Errorf("commitlog: scan %s: %w", s.path, err)
		}
		for _, h := range sc.holes {
			l.holes = append(l.holes, Hole{File: s.path, Offset: s.base + h.pos, Bytes: h.bytes})
		}
		end = s.base + sc.end
		switch {
		case sc.sealed:
			return s.base + l.cfg.SegmentBytes, probs, false, nil
		case sc.invalid == "" && last:
			return end, probs, false, nil
		}
		reason := sc.invalid
		if reason == "" {
			reason = "segment ends without an end marker but a later segment exists"
		}
		next, err := l.nextValid(segs, i, sc.end)
		if err != nil {
			return end, probs, false, err
		}
		if next < 0 {
			probs = append(probs, Problem{File: s.path, Offset: end, Msg: "torn tail (opening the store cuts it): " + reason, TornTail: true})
			return end, probs, true, nil
		}
		if last && end >= unsyncedFrom {
			probs = append(probs, Problem{File: s.path, Offset: end, Msg: fmt.Sprintf("unsynced tail written back out of order, past the durable offset %d (opening the store cuts it; valid-looking entries follow at %d): %s", unsyncedFrom, next, reason), TornTail: true})
			return end, probs, true, nil
		}
		probs = append(probs, Problem{File: s.path, Offset: end, Msg: fmt.Sprintf("corrupt entry in the middle of the log (next valid entry at %d): %s", next, reason)})
		if next >= s.base+l.cfg.SegmentBytes {
			return end, probs, false, nil
		}
		pos = next - s.base
	}
}

// Holes returns the hole records the last Verify found. It must not run
// concurrently with Verify.
func (l *Log) Holes() []Hole { return l.holes }
