package store

import (
	"fmt"
	"io"

	"github.com/keelmq/keel/internal/store/record"
)

// ScanSystem calls fn for every system record from the CommitLog offset
// from (an entry start: a snapshot point, or 0 for the log's first
// offset) up to the written end, and returns the offset it stopped at.
// It is for state a front door keeps in system records of its own kind
// (the Kafka door's transaction coordinator): the core's subscriber
// passes those over, and the door reads them back itself when it starts.
// Each body is checked as the dispatcher checks it; fn runs on the
// caller's goroutine, under no store lock. A from below the log's first
// offset starts at the first offset (retention deleted what was before).
func (s *Store) ScanSystem(from int64, fn SystemFunc) (int64, error) {
	to := s.log.WrittenOffset()
	from = max(from, s.log.MinOffset())
	if from >= to {
		return max(from, to), nil
	}
	r := s.log.NewReader(from)
	for {
		rec, phys, err := r.Next(to)
		if err == io.EOF {
			return to, nil
		}
		if err != nil {
			return r.Offset(), fmt.Errorf("store: scan system records at %d: %w", r.Offset(), err)
		}
		if recordType(rec) != record.System {
			continue
		}
		body := record.Envelope(rec).Body()
		if err := record.CheckSystem(body); err != nil {
			return phys, fmt.Errorf("store: system record at %d: %w", phys, err)
		}
		if err := fn(phys, r.Offset(), body); err != nil {
			return phys, err
		}
	}
}
