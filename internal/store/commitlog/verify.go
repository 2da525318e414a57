package commitlog

import "fmt"

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
// are allowed up to that end afterwards.
func (l *Log) Verify(visit func(phys int64, rec []byte)) (int64, []Problem, error) {
	end, probs, err := l.verify(visit)
	if !l.recovered {
		l.written.Store(end)
	}
	return end, probs, err
}

func (l *Log) verify(visit func(phys int64, rec []byte)) (int64, []Problem, error) {
	l.segMu.RLock()
	segs := append([]*segment(nil), l.segs...)
	l.segMu.RUnlock()
	var probs []Problem
	end := int64(0)
	for i, s := range segs {
		size, err := s.f.Size()
		if err != nil {
			return end, probs, fmt.Errorf("commitlog: size of %s: %w", s.path, err)
		}
		sc, err := scanSegment(s.f, size, l.cfg.SegmentBytes, l.cfg.CheckRecord, func(pos int64, rec []byte) {
			if visit != nil {
				visit(s.base+pos, rec)
			}
		})
		if err != nil {
			return end, probs, fmt.Errorf("commitlog: scan %s: %w", s.path, err)
		}
		end = s.base + sc.end
		last := i == len(segs)-1
		if sc.sealed || (sc.invalid == "" && last) {
			if sc.sealed {
				end = s.base + l.cfg.SegmentBytes
			}
			continue
		}
		reason := sc.invalid
		if reason == "" {
			reason = "segment ends without an end marker but a later segment exists"
		}
		next, err := l.nextValid(segs, i, sc.end)
		if err != nil {
			return end, probs, err
		}
		if next < 0 {
			probs = append(probs, Problem{File: s.path, Offset: s.base + sc.end, Msg: "torn tail (opening the store cuts it): " + reason, TornTail: true})
			return end, probs, nil
		}
		probs = append(probs, Problem{File: s.path, Offset: s.base + sc.end, Msg: fmt.Sprintf("corrupt entry in the middle of the log (next valid entry at %d): %s", next, reason)})
	}
	return end, probs, nil
}
