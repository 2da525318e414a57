package store

import (
	"fmt"
	"slices"

	"github.com/keelmq/keel/internal/store/commitlog"
)

// Repairing isolated records without a replica. A record a read or the
// scrubber isolated (isolate.go) usually lies before the tail that Open
// verifies, where recovery's repair (RepairCorruption) does not reach: its
// damaged bytes would stay in the CommitLog, and `keel check` would report
// them for as long as retention keeps the segment. With RepairCorruption,
// Open therefore also verifies from its start every segment holding an
// isolated record before the verified tail and repairs each corrupt entry
// there as recovery does: the damaged bytes go to <Dir>/quarantine and a
// hole record takes their place (commitlog.RepairSegment). Nothing is
// restored: without a replica the record's messages are lost, as they
// already were to consumers; the repair makes the loss explicit and
// durable, so that the log verifies again and Check counts the hole and
// the lost queue entries instead of failing. (A replica that still holds
// the record intact restores it: `keel check --repair-from-replica`, which
// must come first, as a hole is not corruption it replaces.)
//
// Afterwards every registry record that now lies in a hole record, from
// this repair or from recovery's, is dropped from the registry; one whose
// offset still holds a valid record (a damaged queue entry pointed into
// it, say) is kept.

// repairIsolated repairs the segments holding isolated records before
// verifiedFrom (where Open's verification started) and drops the records
// repaired from the registry. It runs during Open, before any goroutine.
func (s *Store) repairIsolated(verifiedFrom int64) error {
	s.iso.mu.Lock()
	defer s.iso.mu.Unlock()
	var bases []int64
	for _, r := range s.iso.recs {
		if base := s.log.SegmentStart(r.PhysOffset); r.PhysOffset >= s.log.MinOffset() && r.PhysOffset < verifiedFrom && !slices.Contains(bases, base) {
			bases = append(bases, base)
		}
	}
	slices.Sort(bases)
	for _, base := range bases {
		if _, err := s.log.RepairSegment(base, verifiedFrom, s.path(quarantineDir)); err != nil {
			return fmt.Errorf("store: repair the segment of an isolated record: %w", err)
		}
	}
	s.dropHoledLocked()
	return nil
}

// dropHoledLocked drops from the registry the records whose offset lies
// in a hole record. iso.mu is held.
func (s *Store) dropHoledLocked() {
	kept := slices.DeleteFunc(slices.Clone(s.iso.recs), func(r IsolatedRecord) bool {
		_, err := s.log.ReadRecord(r.PhysOffset, nil)
		if !commitlog.IsHole(err) {
			return false
		}
		s.logger.Warn("store: an isolated record was repaired: a hole record stands in its place and its bytes are in quarantine; its messages are lost (consumers skip them)",
			"topic", r.Topic, "queue_id", r.QueueID, "offset", r.QueueOffset, "commitlog_offset", r.PhysOffset,
			"size", r.Size, "found_by", r.FoundBy, "quarantine", s.path(quarantineDir))
		return true
	})
	if len(kept) == len(s.iso.recs) {
		return
	}
	s.iso.recs = kept
	s.persistIsolatedLocked()
}
