package store

import (
	"errors"
	"fmt"

	"github.com/keelmq/keel/internal/store/commitlog"
)

// StoreTimeAt returns the store timestamp (Unix milliseconds) of the
// record at CommitLog offset off, an entry's offset below the Written
// watermark (confirmed or not): replication measures a replica's lag in
// time as the age of the first record it lacks. A blank marker at off
// (the end of a segment) gives the time of the next segment's first
// record. The record is verified; a hole or a damaged record is an
// error.
func (s *Store) StoreTimeAt(off int64) (int64, error) {
	for range 2 {
		if w := s.log.WrittenOffset(); off < 0 || off >= w {
			return 0, fmt.Errorf("store: offset %d is not below the written offset %d: %w", off, w, commitlog.ErrBeyondEnd)
		}
		rec, err := s.log.ReadRecord(off, nil)
		if errors.Is(err, commitlog.ErrNoRecord) && off != s.log.SegmentStart(off) {
			off = s.log.SegmentStart(off) + s.cfg.CommitLogSegmentBytes
			continue
		}
		if err != nil {
			return 0, err
		}
		return storeTimestamp(rec), nil
	}
	return 0, fmt.Errorf("store: no record at or after offset %d: %w", off, commitlog.ErrNoRecord)
}
