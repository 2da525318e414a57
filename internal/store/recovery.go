package store

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/store/index"
)

// recover brings the CommitLog, the ConsumeQueues and the index to a
// consistent state (see the package documentation) before any goroutine
// starts.
func (s *Store) recover(crashed bool) error {
	cp, err := readCheckpoint(s.cfg.FS, s.cfg.Dir)
	haveCP := err == nil
	switch {
	case errors.Is(err, errNoCheckpoint):
	case err != nil:
		s.logger.Warn("store: checkpoint unreadable; verifying the whole CommitLog", "err", err)
	}
	from := int64(0)
	if haveCP {
		from = cp.PhysFlushed
	}
	res, err := s.log.Recover(commitlog.RecoverOptions{
		From: from, Repair: s.cfg.RepairCorruption, QuarantineDir: s.path(quarantineDir),
		Crashed: crashed, DurableFrom: durableFrom(cp, haveCP),
	})
	if err != nil {
		var ce *commitlog.CorruptionError
		if errors.As(err, &ce) {
			return fmt.Errorf("store: refusing to open: %w: %w (nothing was changed; set RepairCorruption to move the rest of the segment to %s and continue)", ErrCorrupt, err, s.path(quarantineDir))
		}
		return fmt.Errorf("store: recover commitlog: %w", err)
	}
	s.logRecovery(crashed, cp, res)
	s.recovered = res
	if haveCP && res.End < cp.PhysFlushed {
		err := fmt.Errorf("store: CommitLog ends at %d, before the checkpointed flushed offset %d: durable data is missing: %w", res.End, cp.PhysFlushed, ErrCorrupt)
		if !s.cfg.RepairCorruption {
			return err
		}
		s.logger.Error("store: continuing because RepairCorruption is set", "err", err)
	}
	if err := s.openQueues(res.End); err != nil {
		return err
	}
	if err := s.openIndex(res.End); err != nil {
		return err
	}
	return s.redispatch(cp, haveCP, res)
}

// durableFrom is the lowest CommitLog offset not known to be durable. With
// no readable checkpoint nothing is known, and recovery must treat every
// invalid entry followed by valid ones as corruption (math.MaxInt64).
func durableFrom(cp checkpoint, haveCP bool) int64 {
	if !haveCP {
		return math.MaxInt64
	}
	return cp.PhysFlushed
}

func (s *Store) logRecovery(crashed bool, cp checkpoint, res commitlog.RecoverResult) {
	attrs := []any{"crashed", crashed, "end", res.End, "scanned_from", res.ScannedFrom, "records", res.Records, "checkpoint_flushed", cp.PhysFlushed}
	if res.TornBytes > 0 || len(res.RemovedSegments) > 0 {
		attrs = append(attrs, "torn_at", res.TornAt, "torn_bytes", res.TornBytes, "reason", res.TornReason)
		if !crashed {
			s.logger.Warn("store: torn CommitLog tail after a clean shutdown", attrs...)
			return
		}
	}
	s.logger.Info("store: recovered", attrs...)
}

// openQueues opens every ConsumeQueue on disk and drops entries that point
// past end or before the CommitLog's first segment.
func (s *Store) openQueues(end int64) error {
	root := s.path(consumeQueueDir)
	topics, err := s.cfg.FS.List(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: list %s: %w", root, err)
	}
	minPhys := s.log.MinOffset()
	for _, topic := range topics {
		ids, err := s.cfg.FS.List(filepath.Join(root, topic))
		if err != nil {
			return fmt.Errorf("store: list consume queues of %s: %w", topic, err)
		}
		for _, name := range ids {
			id, err := strconv.ParseInt(name, 10, 32)
			if err != nil || id < 0 {
				s.logger.Warn("store: ignoring unexpected consume queue directory", "path", filepath.Join(root, topic, name))
				continue
			}
			q, err := s.openQueue(topic, int32(id))
			if err != nil {
				return err
			}
			if err := trimQueue(q, end, minPhys); err != nil {
				return fmt.Errorf("store: trim consume queue %s/%d: %w", topic, id, err)
			}
		}
	}
	return nil
}

func trimQueue(q *consumequeue.Queue, end, minPhys int64) error {
	if err := q.TruncatePhys(end); err != nil {
		return err
	}
	_, err := q.DeleteBeforePhys(minPhys)
	return err
}

func (s *Store) openIndex(end int64) error {
	ix, err := index.Open(index.Config{
		FS: s.cfg.FS, Dir: s.path(indexDir), HashSlots: s.cfg.IndexHashSlots, MaxEntries: s.cfg.IndexMaxEntries, Logger: s.logger,
	})
	if err != nil {
		return fmt.Errorf("store: open index: %w", err)
	}
	s.index = ix
	if err := ix.TruncatePhys(end); err != nil {
		return fmt.Errorf("store: truncate index: %w", err)
	}
	return nil
}

// redispatch rebuilds ConsumeQueue and index entries from the lowest
// offset at which either may be missing entries, then sets the queue
// offset counters.
func (s *Store) redispatch(cp checkpoint, haveCP bool, res commitlog.RecoverResult) error {
	lo := s.log.MinOffset()
	cqFrom, indexFrom := lo, lo
	if haveCP {
		cqFrom = max(lo, min(cp.CQFlushed, res.End))
		indexFrom = max(lo, min(max(cp.IndexFlushed, s.index.MaxPhysOffset()), res.End))
	}
	if len(res.Repaired) > 0 {
		cqFrom = min(cqFrom, max(res.ScannedFrom, lo))
		indexFrom = min(indexFrom, max(res.ScannedFrom, lo))
	}
	from := min(cqFrom, indexFrom)
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	s.reader = s.log.NewReader(from)
	s.dispatched.Store(from)
	s.rebuildCQFrom, s.rebuildIndexFrom = cqFrom, indexFrom
	err := s.dispatchTo(res.End)
	s.rebuildCQFrom, s.rebuildIndexFrom = 0, 0
	if err != nil {
		return fmt.Errorf("store: rebuild consume queues and index from %d: %w", from, err)
	}
	s.logger.Info("store: rebuilt consume queues and index", "cq_from", cqFrom, "index_from", indexFrom, "end", res.End)
	for _, q := range s.allQueues() {
		s.setCounter(q)
	}
	return nil
}

func (s *Store) setCounter(r queueRef) {
	s.counterMap(r.topic)[r.id] = r.q.MaxOffset()
}
