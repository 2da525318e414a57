package store

import (
	"fmt"
	"slices"
	"time"
)

// Retention limits.
const (
	// maxForcedDeletesPerRound bounds how many segments one round removes
	// because the disk is above DiskMaxUsedSpaceRatio, whatever their age.
	maxForcedDeletesPerRound = 10
	// diskCheckEveryBytes makes the put path re-check disk use after this
	// many bytes, so the hard limit holds between retention rounds.
	diskCheckEveryBytes = 64 << 20
	// diskFullRecheck is how often a refused put re-checks disk use while
	// the store is above the hard limit, so that writing resumes soon after
	// space returns, not at the next retention round (refused puts write
	// nothing, so the byte count above never triggers a check).
	diskFullRecheck = 100 * time.Millisecond
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

// checkDisk measures disk use in percent and sets or clears the disk-full
// state.
func (s *Store) checkDisk() (float64, error) {
	s.diskCheckedAt.Store(time.Now().UnixNano())
	total, free, err := s.cfg.FS.DiskUsage(s.cfg.Dir)
	if err != nil {
		return 0, err
	}
	if total == 0 {
		return 0, nil
	}
	usage := float64(total-min(free, total)) * 100 / float64(total)
	if usage >= float64(s.cfg.DiskHardLimitRatio) {
		err := fmt.Errorf("%w: %.1f%% used (limit %d%%), %d bytes free on the disk of %s", ErrDiskFull, usage, s.cfg.DiskHardLimitRatio, free, s.cfg.Dir)
		if s.diskFull.Swap(&err) == nil {
			s.logger.Error("store: refusing writes: disk nearly full", "err", err)
		}
	} else if s.diskFull.Swap(nil) != nil {
		s.logger.Info("store: disk use below the hard limit again; accepting writes", "usage_percent", usage)
	}
	return usage, nil
}

// diskFullNow returns the disk-full error while the store is above the hard
// limit, re-checking the disk first when the last check is older than
// diskFullRecheck.
func (s *Store) diskFullNow() *error {
	p := s.diskFull.Load()
	if p == nil || time.Now().UnixNano()-s.diskCheckedAt.Load() < int64(diskFullRecheck) {
		return p
	}
	if _, err := s.checkDisk(); err != nil {
		s.logger.Warn("store: disk usage unavailable", "err", err)
		return p
	}
	return s.diskFull.Load()
}

// noteWritten re-checks the disk after every diskCheckEveryBytes written.
func (s *Store) noteWritten(n int64) {
	if s.sinceDiskCheck.Add(n) >= diskCheckEveryBytes {
		s.sinceDiskCheck.Store(0)
		if _, err := s.checkDisk(); err != nil {
			s.logger.Warn("store: disk usage unavailable", "err", err)
		}
	}
}

func (s *Store) deleteExpired(usage float64) error {
	hours, _ := parseDeleteWhen(s.cfg.DeleteWhen) // validated by Config.Validate
	now := s.cfg.Now()
	force := usage >= float64(s.cfg.DiskMaxUsedSpaceRatio)
	if !force && !slices.Contains(hours, now.Hour()) {
		return nil
	}
	cut := s.retentionCut(now, force)
	if cut < 0 {
		return nil
	}
	return s.deleteBefore(cut)
}

// retentionCut returns the CommitLog offset before which whole segments may
// be deleted, or -1. A segment's age is the store time of the first record
// of the segment after it (when it was closed); the last segment and
// segments not yet dispatched and flushed are kept.
func (s *Store) retentionCut(now time.Time, force bool) int64 {
	limit := min(s.VisibleOffset(), s.log.FlushedOffset())
	segs := s.log.Segments()
	cut, forced := int64(-1), 0
	for i := 0; i+1 < len(segs); i++ {
		next := segs[i+1]
		if next.Base > limit {
			break
		}
		expired := false
		if closed, ok := s.segmentClosedAt(next.Base, segs[i].Path); ok {
			expired = now.Sub(closed) >= s.cfg.FileReservedTime
		}
		if !expired {
			if !force || forced >= maxForcedDeletesPerRound {
				break
			}
			forced++
		}
		cut = next.Base
	}
	return cut
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
