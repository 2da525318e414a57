package store

import (
	"fmt"
	"slices"
	"time"

	"github.com/keelmq/keel/internal/store/commitlog"
)

// runRetention checks disk use and deletes expired segments every
// RetentionCheckInterval.
func (s *Store) runRetention() {
	t := time.NewTicker(s.cfg.RetentionCheckInterval)
	defer t.Stop()
	s.runRetentionOnce()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			s.runRetentionOnce()
		}
	}
}

// runRetentionOnce is one retention round: update the disk-full state, then
// delete what is expired (at DeleteWhen) or what must go (disk above
// DiskMaxUsedSpaceRatio).
func (s *Store) runRetentionOnce() {
	usage, err := s.checkDisk()
	if err != nil {
		s.logger.Warn("store: disk usage unavailable", "err", err)
		return
	}
	if err := s.deleteExpired(usage); err != nil {
		s.logger.Error("store: retention failed", "err", err)
	}
}

// deleteExpired deletes, at the hours of DeleteWhen, the segments older
// than FileReservedTime, and, while disk use is at or above
// DiskMaxUsedSpaceRatio, what DiskPressureDelete allows (pressure.go).
func (s *Store) deleteExpired(usage float64) error {
	hours, _ := parseDeleteWhen(s.cfg.DeleteWhen) // validated by Config.Validate
	now := s.cfg.Now()
	if slices.Contains(hours, now.Hour()) {
		if cut := s.expiredCut(now); cut >= 0 {
			if err := s.deleteBefore(cut); err != nil {
				return err
			}
		}
	}
	if usage < float64(s.cfg.DiskMaxUsedSpaceRatio) {
		s.pressureKept.Store(nil)
		return nil
	}
	return s.relievePressure(now)
}

// expiredCut returns the CommitLog offset before which every whole segment
// is expired, or -1. A segment's age is the store time of the first record
// of the segment after it (when it was closed); the last segment and
// segments not yet dispatched and flushed are kept.
func (s *Store) expiredCut(now time.Time) int64 {
	segs, limit := s.log.Segments(), s.deletableLimit()
	held, at, err := s.heldLimit() // holds.go
	if err != nil {
		s.logger.Error("store: retention: a queue hold cannot be read; nothing is deleted by age this round", "err", err)
		return -1
	}
	cut := int64(-1)
	for i := 0; i+1 < len(segs) && segs[i+1].Base <= limit; i++ {
		if !s.segmentExpired(now, segs[i], segs[i+1].Base) {
			break
		}
		if segs[i+1].Base > held {
			s.noteRetentionHeld(segs[i], held, at)
			break
		}
		cut = segs[i+1].Base
	}
	return cut
}

// deletableLimit is the CommitLog offset below which segments may be
// deleted at all: dispatched and flushed.
func (s *Store) deletableLimit() int64 {
	return min(s.VisibleOffset(), s.log.FlushedOffset())
}

// segmentExpired reports whether seg, which ends at nextBase, was closed at
// least FileReservedTime before now.
func (s *Store) segmentExpired(now time.Time, seg commitlog.Segment, nextBase int64) bool {
	closed, ok := s.segmentClosedAt(nextBase, seg.Path)
	return ok && now.Sub(closed) >= s.cfg.FileReservedTime
}

// segmentClosedAt estimates when the segment ending at nextBase was closed:
// the store time of the record at nextBase, else the file's mtime.
func (s *Store) segmentClosedAt(nextBase int64, path string) (time.Time, bool) {
	if rec, err := s.log.ReadRecord(nextBase, nil); err == nil {
		return time.UnixMilli(storeTimestamp(rec)), true
	}
	fi, err := s.cfg.FS.Stat(path)
	if err != nil {
		return time.Time{}, false
	}
	return fi.ModTime(), true
}

// deleteBefore removes CommitLog segments before cut and the ConsumeQueue
// and index entries that pointed into them.
func (s *Store) deleteBefore(cut int64) error {
	s.progressMu.Lock()
	defer s.progressMu.Unlock()
	removed, err := s.log.DeleteBefore(cut)
	if err != nil {
		return fmt.Errorf("store: delete segments: %w", err)
	}
	if len(removed) == 0 {
		return nil
	}
	minPhys := s.log.MinOffset()
	for _, r := range s.allQueues() {
		if _, err := r.q.DeleteBeforePhys(minPhys); err != nil {
			return fmt.Errorf("store: retention of consume queue: %w", err)
		}
	}
	if err := s.index.DeleteBeforePhys(minPhys); err != nil {
		return fmt.Errorf("store: retention of index: %w", err)
	}
	s.logger.Info("store: retention removed CommitLog segments", "count", len(removed), "min_offset", minPhys)
	return nil
}
