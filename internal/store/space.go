package store

import (
	"fmt"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/index"
)

// Disk space. Every combined write is admitted (admitWrite) only if, after
// it and what dispatching it will add, at least the reserve stays free on
// the disk of Config.Dir. The reserve is the larger of the space above
// DiskHardLimitRatio and the room that dispatch, the checkpoint and the
// broker's metadata may still need once writes are refused (minReserveBytes:
// DiskReserveBytes, the CommitLog prefill window and one index file's slot
// table). So writes are refused with DISK_FULL while that room is still
// free: the CommitLog, the ConsumeQueues and the index never meet ENOSPC
// because of the store's own writes, dispatch keeps making acknowledged
// messages visible and metadata can still be saved.
//
// Free space is not measured for every write: the store keeps an estimate,
// the last statfs minus every byte admitted since, and measures again when
// the estimate is older than spaceRecheckInterval or leaves less than
// spaceSlackBytes above the reserve (then every write measures). Other
// processes writing to the same disk are seen at the next measurement: a
// disk they fill faster than that can still fail a write with ENOSPC, which
// the CommitLog answers with DISK_FULL and the dispatcher retries (see
// ErrNoSpace and dispatch.go).
//
// DiskHardLimitRatio 100 turns admission off: writes go on until the
// filesystem refuses them (tests of the ENOSPC paths use it).

const (
	// spaceRecheckInterval bounds how long admitWrite trusts its estimate.
	spaceRecheckInterval = 100 * time.Millisecond
	// spaceSlackBytes: an estimate leaving less than this above the
	// reserve is measured again before the write is admitted.
	spaceSlackBytes = 16 << 20
	// derivedBytesPerRecord is charged with each record for what
	// dispatching it writes: a 20-byte ConsumeQueue entry and two 20-byte
	// index entries (its UNIQ_KEY and a key), rounded up. Records with
	// more keys draw on the reserve.
	derivedBytesPerRecord = 64
	// fullMarginBytes: the store counts as full (Stats.DiskFull, puts
	// refused before they are encoded) once a write of this size would no
	// longer be admitted; larger writes may be refused before that.
	fullMarginBytes = 1 << 10
	// diskFullRecheck is how often a refused put re-checks disk use while
	// the store is above the hard limit, so that writing resumes soon after
	// space returns, not at the next retention round (refused puts write
	// nothing, so nothing else would re-check).
	diskFullRecheck = 100 * time.Millisecond
)

// spaceState is the free-space estimate of admitWrite.
type spaceState struct {
	mu         sync.Mutex
	freeBytes  int64     // measured free bytes minus the bytes admitted since; guarded by mu
	totalBytes int64     // size of the filesystem (0: unknown); guarded by mu
	measuredAt time.Time // guarded by mu
	failing    bool      // the last measurement failed (logged once); guarded by mu
}

// minReserveBytes is the least space kept free under the hard limit: the
// configured DiskReserveBytes, the CommitLog prefill window (the prefiller
// may still zero-fill that far once writes stop) and a full slot table of
// an index file (a new file's sparse table fills in as keys arrive).
func (c *Config) minReserveBytes() int64 {
	table := int64(index.HeaderSize) + int64(c.IndexHashSlots)*int64(index.SlotSize)
	return c.DiskReserveBytes + c.prefillBytes() + table
}

// reserveBytes is how much of a disk of totalBytes must stay free.
func (s *Store) reserveBytes(totalBytes int64) int64 {
	if s.cfg.DiskHardLimitRatio >= 100 {
		return 0
	}
	hard := totalBytes * int64(100-s.cfg.DiskHardLimitRatio) / 100
	return max(hard, s.cfg.minReserveBytes())
}

// admitWrite decides whether the combined write of reqs may go ahead, and
// charges it against the free-space estimate. It returns an error wrapping
// ErrDiskFull if the write would leave less than the reserve free.
// appendMu is held.
func (s *Store) admitWrite(reqs []*putReq) error {
	if s.cfg.DiskHardLimitRatio >= 100 {
		return nil
	}
	need := int64(commitlog.BlankBytes) // the write may close a segment
	for _, r := range reqs {
		need += int64(len(r.buf)) + int64(len(r.recs))*(commitlog.TrailerBytes+derivedBytesPerRecord)
	}
	return s.admitBytes(need)
}

// admitBytes is admitWrite for a write needing need bytes (the records,
// their trailers and what dispatching them adds). appendMu is held.
func (s *Store) admitBytes(need int64) error {
	sp := &s.space
	sp.mu.Lock()
	defer sp.mu.Unlock()
	stale := time.Since(sp.measuredAt) >= spaceRecheckInterval
	if stale || (sp.totalBytes > 0 && sp.freeBytes-need < s.reserveBytes(sp.totalBytes)+spaceSlackBytes) {
		s.measureForWriteLocked()
	}
	if sp.totalBytes == 0 {
		return nil // nothing known: let the filesystem decide
	}
	if reserve := s.reserveBytes(sp.totalBytes); sp.freeBytes-need < reserve {
		return fmt.Errorf("%w: %d bytes free on the disk of %s; a write of %d bytes would leave less than the %d bytes kept for dispatch and metadata (%s)",
			ErrDiskFull, max(sp.freeBytes, 0), s.cfg.Dir, need, reserve, s.reserveRule(sp.totalBytes))
	}
	sp.freeBytes -= need
	return nil
}

// reserveByRatio reports whether the space above DiskHardLimitRatio, not
// minReserveBytes, sets the reserve of a disk of totalBytes.
func (s *Store) reserveByRatio(totalBytes int64) bool {
	return totalBytes*int64(100-s.cfg.DiskHardLimitRatio)/100 >= s.cfg.minReserveBytes()
}

// reserveRule says which rule sets the reserve of a disk of totalBytes.
func (s *Store) reserveRule(totalBytes int64) string {
	if s.reserveByRatio(totalBytes) {
		return fmt.Sprintf("the space above the hard limit of %d%% used", s.cfg.DiskHardLimitRatio)
	}
	return fmt.Sprintf("the free-space reserve, more than the space above the hard limit of %d%% used on this disk", s.cfg.DiskHardLimitRatio)
}

// diskFullError is the disk-full state's error, naming what refused: the
// hard limit ratio, or the free-space reserve (minReserveBytes) on a disk
// too small for the ratio to leave that much.
func (s *Store) diskFullError(usage float64, free, reserve int64) error {
	if s.reserveByRatio(s.space.totalBytes) {
		return fmt.Errorf("%w: %.1f%% of the disk of %s used, above the hard limit of %d%% (%d bytes free, %d kept for dispatch and metadata)",
			ErrDiskFull, usage, s.cfg.Dir, s.cfg.DiskHardLimitRatio, free, reserve)
	}
	return fmt.Errorf("%w: %d bytes free on the disk of %s, less than the free-space reserve of %d bytes kept for dispatch and metadata (%.1f%% used; the hard limit of %d%% is not reached)",
		ErrDiskFull, free, s.cfg.Dir, reserve, usage, s.cfg.DiskHardLimitRatio)
}

// measureForWriteLocked is measureSpaceLocked for admitWrite: a failure is
// logged once per series and leaves the estimate as it was until the next
// spaceRecheckInterval. s.space.mu is held.
func (s *Store) measureForWriteLocked() {
	sp := &s.space
	err := s.measureSpaceLocked()
	if err == nil {
		sp.failing = false
		return
	}
	sp.measuredAt = time.Now()
	if !sp.failing {
		sp.failing = true
		s.logger.Warn("store: disk usage unavailable; admitting writes on the last estimate", "err", err)
	}
}

// measureSpaceLocked measures the disk, resets the estimate and sets or
// clears the disk-full state. s.space.mu is held.
func (s *Store) measureSpaceLocked() error {
	s.diskCheckedAt.Store(time.Now().UnixNano())
	total, free, err := s.cfg.FS.DiskUsage(s.cfg.Dir)
	if err != nil {
		return err
	}
	sp := &s.space
	sp.totalBytes, sp.freeBytes, sp.measuredAt = int64(total), int64(min(free, total)), time.Now()
	if total == 0 {
		return nil
	}
	usage := float64(total-min(free, total)) * 100 / float64(total)
	reserve := s.reserveBytes(sp.totalBytes)
	if s.cfg.DiskHardLimitRatio < 100 && sp.freeBytes-fullMarginBytes < reserve {
		err := s.diskFullError(usage, sp.freeBytes, reserve)
		if s.diskFull.Swap(&err) == nil {
			s.logger.Error("store: refusing writes: disk nearly full", "err", err)
		}
	} else if s.diskFull.Swap(nil) != nil {
		s.logger.Info("store: enough free disk space again; accepting writes", "usage_percent", usage)
	}
	return nil
}

// checkDisk measures disk use in percent and sets or clears the disk-full
// state.
func (s *Store) checkDisk() (float64, error) {
	s.space.mu.Lock()
	defer s.space.mu.Unlock()
	if err := s.measureSpaceLocked(); err != nil {
		return 0, err
	}
	total, free := s.space.totalBytes, s.space.freeBytes
	if total == 0 {
		return 0, nil
	}
	return float64(total-free) * 100 / float64(total), nil
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
