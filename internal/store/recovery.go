package store

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/store/index"
)

// recover brings the CommitLog, the ConsumeQueues and the index to a
// consistent state (see the package documentation) before any goroutine
// starts.
func (s *Store) recover(crashed bool) error {
	t0 := time.Now()
	cp, err := readCheckpoint(s.cfg.FS, s.cfg.Dir)
	haveCP := err == nil
	switch {
	case errors.Is(err, errNoCheckpoint):
	case err != nil:
		s.logger.Warn("store: checkpoint unreadable; verifying the whole CommitLog", "err", err)
	}
	// The queues are opened first: their entries tell where a record
	// starts near the checkpointed flushed offset (resumePoint). They are
	// trimmed to the recovered end afterwards.
	if err := s.openQueues(); err != nil {
		return err
	}
	t1 := time.Now()
	from, resume, mustReach := int64(0), int64(0), int64(0)
	if haveCP {
		mustReach, resume = cp.PhysFlushed, s.resumePoint(cp.PhysFlushed)
		if resume > 0 {
			from = cp.PhysFlushed
		} // else the tail reaches back to the start of the log: verify it all
	}
	res, err := s.log.Recover(commitlog.RecoverOptions{
		From: from, Repair: s.cfg.RepairCorruption, QuarantineDir: s.path(quarantineDir),
		Crashed: crashed, DurableFrom: durableFrom(cp, haveCP), Resume: resume, MustReach: mustReach,
	})
	if err != nil {
		if errors.Is(err, commitlog.ErrCorrupt) {
			return s.refuse(crashed, err)
		}
		return fmt.Errorf("store: recover commitlog: %w", err)
	}
	s.logRecovery(crashed, cp, res, time.Since(t1))
	if s.cfg.RepairCorruption {
		if err := s.repairIsolated(res.ScannedFrom); err != nil { // isolate_repair.go
			return err
		}
	}
	s.recovered = res
	if haveCP && res.End < cp.PhysFlushed {
		err := fmt.Errorf("store: CommitLog ends at %d, before the checkpointed flushed offset %d: durable data is missing", res.End, cp.PhysFlushed)
		if !s.cfg.RepairCorruption {
			return s.refuse(crashed, err)
		}
		s.logger.Error("store: continuing because repair is on", "err", err)
	}
	t2 := time.Now()
	if err := s.trimQueues(res.End); err != nil {
		return err
	}
	if err := s.openIndex(res.End); err != nil {
		return err
	}
	t3 := time.Now()
	if s.tombstones, err = readTombstones(s.cfg.FS, s.cfg.Dir); err != nil {
		return err
	}
	if err := s.redispatch(cp, haveCP, res); err != nil {
		return err
	}
	if err := s.capCheckpoint(cp, haveCP, res.End); err != nil { // truncate.go
		return err
	}
	s.logger.Info("store: opened", "queues", len(s.allQueues()), "open_queues", t1.Sub(t0), "commitlog", t2.Sub(t1),
		"trim_queues_and_index", t3.Sub(t2), "redispatch", time.Since(t3), "total", time.Since(t0))
	return nil
}

// repairHint is what a refusal to open says an operator can do. It names
// the keel flag that sets Config.RepairCorruption.
const repairHint = "the CommitLog was not changed; to copy the damaged bytes to %s, keep every record that verifies and start, " +
	"run keel with --repair-corruption; see docs/operations.md, \"Corruption: detect, decide, repair, verify\""

// refuse returns the error of an Open that found durable data damaged or
// missing. Recovery changed nothing before deciding to refuse; the abort
// marker Open created is removed again, so the next start sees the store
// as this one found it (a clean shutdown stays one).
func (s *Store) refuse(crashed bool, cause error) error {
	if !crashed {
		if err := s.cfg.FS.Remove(s.path(abortName)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.logger.Error("store: remove the abort marker after refusing to open", "err", err)
		} else if err := s.cfg.FS.SyncDir(s.cfg.Dir); err != nil {
			s.logger.Error("store: sync the data directory after refusing to open", "err", err)
		}
	}
	return &refusal{cause: cause, hint: fmt.Sprintf(repairHint, s.path(quarantineDir))}
}

// refusal is the error of an Open that refused: it wraps ErrCorrupt and
// its cause.
type refusal struct {
	cause error
	hint  string
}

func (e *refusal) Error() string {
	return "store: refusing to open: " + e.cause.Error() + " (" + e.hint + ")"
}

func (e *refusal) Unwrap() []error { return []error{ErrCorrupt, e.cause} }

// verifyTailBytes is how much of the log before the checkpointed flushed
// offset Open verifies at least. Open starts verifying at the record the
// ConsumeQueues locate closest below that target, in whichever segment it
// lies, and at the start of the segment holding the target otherwise. A
// variable so that tests can lower it.
var verifyTailBytes int64 = 32 << 20

// resumeSearchQueues is how many queues (those holding the newest records)
// resumePoint searches for an entry before its target.
const resumeSearchQueues = 4

// resumePoint returns the CommitLog offset where Open starts verifying: a
// record at least verifyTailBytes before from, as close to that target as
// the ConsumeQueues tell, or the start of the segment holding the target
// (always the start of an entry) if they locate none closer; 0 when the
// target lies before the log. Every ConsumeQueue entry was made from a
// record the dispatcher had read and verified, so its PhysOffset is where a
// record starts; Recover checks that anyway and verifies the whole segment
// if it is not.
func (s *Store) resumePoint(from int64) int64 {
	target := from - verifyTailBytes
	if target <= 0 {
		return 0
	}
	best := target - target%s.cfg.CommitLogSegmentBytes
	refs := s.allQueues()
	last := make([]int64, len(refs))
	for i, r := range refs {
		last[i] = -1
		if e, ok := r.q.LastEntry(); ok {
			last[i] = e.PhysOffset
			if e.PhysOffset <= target {
				best = max(best, e.PhysOffset)
			}
		}
	}
	// The queues with the newest records are the likeliest to have an
	// entry close below the target.
	order := make([]int, len(refs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(last[b], last[a]) })
	for _, i := range order[:min(len(order), resumeSearchQueues)] {
		if last[i] > target {
			best = max(best, lastEntryAtOrBefore(refs[i].q, target))
		}
	}
	return best
}

// lastEntryAtOrBefore returns the PhysOffset of the last entry of q that
// points at or before target, or -1 (also when an entry cannot be read).
func lastEntryAtOrBefore(q *consumequeue.Queue, target int64) int64 {
	found := int64(-1)
	var e [1]consumequeue.Entry
	for lo, hi := q.MinOffset(), q.MaxOffset(); lo < hi; {
		mid := lo + (hi-lo)/2
		if n, err := q.Get(mid, e[:]); err != nil || n != 1 {
			return found
		}
		if e[0].PhysOffset <= target {
			found, lo = e[0].PhysOffset, mid+1
		} else {
			hi = mid
		}
	}
	return found
}

// durableFrom is the lowest CommitLog offset the checkpoint knows durable
// (Recover raises it to the CommitLog's flushed mark). With no readable
// checkpoint it says nothing is known (math.MaxInt64): unless the mark
// knows better, recovery treats every invalid entry followed by valid ones
// as corruption.
func durableFrom(cp checkpoint, haveCP bool) int64 {
	if !haveCP {
		return math.MaxInt64
	}
	return cp.PhysFlushed
}

// markAttr is the flushed mark for the recovery log line.
func markAttr(m commitlog.Mark) any {
	switch {
	case m.Found:
		return m.Offset
	case m.Invalid != "":
		return "invalid: " + m.Invalid
	}
	return "none"
}

func (s *Store) logRecovery(crashed bool, cp checkpoint, res commitlog.RecoverResult, took time.Duration) {
	attrs := []any{"crashed", crashed, "end", res.End, "scanned_from", res.ScannedFrom, "records", res.Records,
		"checkpoint_flushed", cp.PhysFlushed, "flushed_mark", markAttr(res.Mark), "took", took}
	if res.TornBytes > 0 || len(res.RemovedSegments) > 0 {
		attrs = append(attrs, "torn_at", res.TornAt, "torn_bytes", res.TornBytes, "reason", res.TornReason)
		if !crashed {
			s.logger.Warn("store: torn CommitLog tail after a clean shutdown", attrs...)
			return
		}
	}
	s.logger.Info("store: recovered", attrs...)
}

// openQueues opens every ConsumeQueue on disk, the topics spread over
// GOMAXPROCS goroutines (thousands of queues cost tens of thousands of
// small system calls).
func (s *Store) openQueues() error {
	root := s.path(consumeQueueDir)
	topics, err := s.cfg.FS.List(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: list %s: %w", root, err)
	}
	errs := make([]error, len(topics))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(len(topics), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(topics) {
					return
				}
				if errs[i] = s.openTopicQueues(root, topics[i]); errs[i] != nil {
					next.Store(int64(len(topics))) // stop the others
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) openTopicQueues(root, topic string) error {
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
		if _, err := s.openQueue(topic, int32(id)); err != nil {
			return err
		}
	}
	return nil
}

// trimQueues drops the ConsumeQueue entries that point past end or before
// the CommitLog's first segment.
func (s *Store) trimQueues(end int64) error {
	minPhys := s.log.MinOffset()
	for _, r := range s.allQueues() {
		if err := trimQueue(r.q, end, minPhys); err != nil {
			return fmt.Errorf("store: trim consume queue %s/%d: %w", r.topic, r.id, err)
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
		// Queue entries of records a hole replaced are rebuilt (holes.go;
		// re-appending an existing entry is a no-op); the index keeps what
		// it holds: records it indexed are not indexed again.
		cqFrom = min(cqFrom, max(res.ScannedFrom, lo))
		indexFrom = min(indexFrom, max(res.ScannedFrom, lo, s.index.MaxPhysOffset()+1))
	}
	from := min(cqFrom, indexFrom)
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	s.reader = s.log.NewFileReader(from)
	s.marks.visible.Store(from)
	s.rebuildCQFrom, s.rebuildIndexFrom = cqFrom, indexFrom
	limit := res.End
	s.recoveredEnd = res.End
	if s.externalReplicated() {
		// A replica, and a synchronous master, show again only what they
		// had shown: the rest is shown once the replicas (a replica's
		// master) confirm it, so no consumer reads a record no replica
		// holds (a master's tail written but not replicated before it
		// stopped) and no truncation takes back what a consumer read.
		limit = s.replicaShownBefore(cp, haveCP, from, res.End) // truncate.go
	}
	err := s.dispatchTo(limit)
	s.rebuildCQFrom, s.rebuildIndexFrom = 0, 0
	if err != nil {
		return fmt.Errorf("store: rebuild consume queues and index from %d: %w", from, err)
	}
	s.logger.Info("store: rebuilt consume queues and index", "cq_from", cqFrom, "index_from", indexFrom, "end", res.End)
	for _, q := range s.allQueues() {
		s.setCounter(q)
	}
	if limit < res.End {
		return s.log.CheckBoundary(limit, res.End, func(_ int64, rec []byte) { s.followQueueOffsets(rec) })
	}
	return nil
}

func (s *Store) setCounter(r queueRef) {
	s.counterMap(r.topic)[r.id] = r.q.MaxOffset()
}
