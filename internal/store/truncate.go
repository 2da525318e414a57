package store

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// Truncation of a replica whose log diverged from its master's (package
// replication): TruncateReplica removes the CommitLog from an offset on,
// durably, so that the replica can take the master's bytes there.
//
// Order, each step durable before the next:
//
//  0. the ConsumeQueues, index and checkpoint as they are (what the
//     replica showed is then known after a crash);
//  1. the intent, <Dir>/truncate ("keel-truncate 1\n<offset>\n", replaced
//     atomically);
//  2. the CommitLog: later segments removed newest first (directory
//     synced), the segment holding the offset cut and fdatasync'ed; the
//     ConsumeQueue and index entries at or past it removed (there are none
//     when the offset is not below Visible, which TruncateReplica demands);
//  3. the checkpoint, rewritten (its flushed offsets no longer pass the
//     offset, so the next Open does not take the shorter log for lost
//     data);
//  4. the intent removed (directory synced).
//
// Open finishes a truncation whose intent it finds before it opens the
// CommitLog (steps 2-4 again, on the files), so a crash at any point never
// lets the removed tail come back: before step 1 nothing was removed,
// after it the removal is completed.
//
// The rule that protects readers: a replica never truncates below what it
// showed. TruncateReplica refuses (ErrTruncateVisible) an offset below
// Visible, below Confirmed or below what the master last reported
// confirmed: a consumer may have read those records, and taking them back
// would break "nothing a consumer read is taken back".

// ErrTruncateVisible: a truncation below what the replica made visible or
// knew confirmed. Nothing was changed.
var ErrTruncateVisible = errors.New("store: truncation would take back records a consumer may have read")

// ErrNotBoundary: a truncation offset inside a record of the replica's
// log (its log and its master's are not the same there).
var ErrNotBoundary = commitlog.ErrNotBoundary

// truncateIntentName is the intent file of a truncation in progress.
const truncateIntentName = "truncate"

const truncateIntentHeader = "keel-truncate 1\n"

// Truncation steps named to Config.TruncateFailpoint.
const (
	TruncateStepIntent     = "intent"     // the intent is durable; nothing removed yet
	TruncateStepLog        = "log"        // the CommitLog is cut
	TruncateStepCheckpoint = "checkpoint" // the checkpoint is rewritten
	TruncateStepDone       = "done"       // the intent is removed
)

// TruncateReplica removes the CommitLog from off on, durably (see above),
// and moves the written and flushed offsets back to off. Only on a store
// opened with Config.Replica. off must be an entry boundary of the log
// (ErrNotBoundary otherwise) and not below Visible, Confirmed
// or the last AdvanceReplicated (ErrTruncateVisible). An off at or past
// the written offset changes nothing. A failure after the intent is
// written makes the store read-only; the next Open finishes the
// truncation.
func (s *Store) TruncateReplica(off int64) error {
	if !s.cfg.Replica {
		return errors.New("store: TruncateReplica on a store that is not a replica")
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	w := s.log.WrittenOffset()
	if off >= w {
		return nil
	}
	vis := s.VisibleOffset()
	if shown := max(vis, s.Offset(Confirmed), s.marks.reported.Load()); off < shown {
		return fmt.Errorf("%w: offset %d is below %d (visible %d, confirmed %d, master confirmed %d)",
			ErrTruncateVisible, off, shown, vis, s.Offset(Confirmed), s.marks.reported.Load())
	}
	if off < s.log.MinOffset() {
		return fmt.Errorf("%w: offset %d is before the log's first segment %d", ErrTruncateVisible, off, s.log.MinOffset())
	}
	if err := s.log.CheckBoundary(vis, off, nil); err != nil {
		return err
	}
	s.progressMu.Lock()
	defer s.progressMu.Unlock()
	// What was shown is made durable first: after a crash the replica
	// shows at least as much again (replicaShownBefore).
	if err := s.persistProgressLocked(); err != nil {
		return err
	}
	if err := writeTruncateIntent(s.cfg.FS, s.cfg.Dir, off); err != nil {
		return err
	}
	s.failpoint(TruncateStepIntent)
	s.logger.Warn("store: truncating the replica's CommitLog", "offset", off, "written", w, "bytes", w-off)
	if err := s.log.Truncate(off); err != nil {
		s.fail(err)
		return err
	}
	if err := s.truncateDerived(off); err != nil {
		s.fail(err)
		return err
	}
	s.failpoint(TruncateStepLog)
	if err := s.persistProgressLocked(); err != nil {
		s.fail(err)
		return err
	}
	s.failpoint(TruncateStepCheckpoint)
	if err := removeTruncateIntent(s.cfg.FS, s.cfg.Dir); err != nil {
		s.fail(err)
		return err
	}
	s.failpoint(TruncateStepDone)
	return s.refollowQueueOffsets(vis, off)
}

func (s *Store) failpoint(step string) {
	if s.cfg.TruncateFailpoint != nil {
		s.cfg.TruncateFailpoint(step)
	}
}

// truncateDerived removes ConsumeQueue and index entries at or past off
// (none when off is not below Visible) and restarts the dispatcher's
// reader where it was, so nothing it read ahead is used.
func (s *Store) truncateDerived(off int64) error {
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	for _, r := range s.allQueues() {
		if err := r.q.TruncatePhys(off); err != nil {
			return fmt.Errorf("store: truncate consume queue %s/%d: %w", r.topic, r.id, err)
		}
	}
	if err := s.index.TruncatePhys(off); err != nil {
		return fmt.Errorf("store: truncate index: %w", err)
	}
	s.reader = s.log.NewFileReader(min(s.reader.Offset(), off))
	return nil
}

// refollowQueueOffsets sets the queue offset counters to what the log
// below off holds: the ConsumeQueues for what is dispatched (below vis,
// read before them), the records in [vis, off) for the rest. appendMu is
// held.
func (s *Store) refollowQueueOffsets(vis, off int64) error {
	s.counters = map[string]map[int32]int64{}
	for _, q := range s.allQueues() {
		s.setCounter(q)
	}
	return s.log.CheckBoundary(vis, off, func(_ int64, rec []byte) { s.followQueueOffsets(rec) })
}

// TruncateClosed has the next Open of the closed store in dir cut its
// CommitLog at off, below what it showed too: it only writes the intent
// (durably), which Open finishes before it opens the log (its
// ConsumeQueues and index then drop the entries past the cut, and it
// shows nothing past it). It is the one way to take back records a
// consumer may have read, for a former ASYNC_MASTER in controller mode
// whose acknowledged tail no replica holds: the group's new master has
// other records at those offsets, and the caller logs the loss. off must
// be an entry boundary of the log; Open checks the log it leaves like any
// other.
func TruncateClosed(fs vfs.FS, dir string, off int64) error {
	if fs == nil {
		fs = vfs.OS{}
	}
	if off < 0 {
		return fmt.Errorf("store: truncation offset %d", off)
	}
	return writeTruncateIntent(fs, dir, off)
}

// finishTruncation completes a truncation whose intent Open found: on the
// files, before the CommitLog is opened.
func (s *Store) finishTruncation() error {
	off, ok, err := readTruncateIntent(s.cfg.FS, s.cfg.Dir)
	if err != nil || !ok {
		return err
	}
	s.logger.Warn("store: finishing an interrupted truncation of the CommitLog", "offset", off)
	if err := commitlog.TruncateFiles(s.cfg.FS, s.path(commitLogDir), s.cfg.CommitLogSegmentBytes, off); err != nil {
		return fmt.Errorf("store: finish truncation at %d: %w", off, err)
	}
	cp, err := readCheckpoint(s.cfg.FS, s.cfg.Dir)
	switch {
	case err == nil:
		cp.PhysFlushed, cp.CQFlushed, cp.IndexFlushed = min(cp.PhysFlushed, off), min(cp.CQFlushed, off), min(cp.IndexFlushed, off)
		if err := writeCheckpoint(s.cfg.FS, s.cfg.Dir, cp); err != nil {
			return err
		}
	case errors.Is(err, errNoCheckpoint):
	default:
		// Unreadable: recovery verifies the whole log anyway.
		s.logger.Warn("store: checkpoint unreadable while finishing a truncation", "err", err)
	}
	return removeTruncateIntent(s.cfg.FS, s.cfg.Dir)
}

func writeTruncateIntent(fs vfs.FS, dir string, off int64) error {
	b := truncateIntentHeader + strconv.FormatInt(off, 10) + "\n"
	if err := vfs.WriteFileDurable(fs, dir+"/"+truncateIntentName, []byte(b), 0o600); err != nil {
		return fmt.Errorf("store: write truncation intent: %w", err)
	}
	return nil
}

func removeTruncateIntent(fs vfs.FS, dir string) error {
	if err := fs.Remove(dir + "/" + truncateIntentName); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: remove truncation intent: %w", err)
	}
	if err := fs.SyncDir(dir); err != nil {
		return fmt.Errorf("store: sync dir %s: %w", dir, err)
	}
	return nil
}

// readTruncateIntent returns the offset of a truncation in progress. An
// intent that does not decode is an error: guessing could resurrect the
// tail or cut more than was meant.
func readTruncateIntent(fs vfs.FS, dir string) (int64, bool, error) {
	path := dir + "/" + truncateIntentName
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	b := make([]byte, 64)
	n, _ := f.ReadAt(b, 0)
	rest, ok := strings.CutPrefix(string(b[:n]), truncateIntentHeader)
	off, perr := strconv.ParseInt(strings.TrimSuffix(rest, "\n"), 10, 64)
	if !ok || perr != nil || off < 0 || !strings.HasSuffix(rest, "\n") {
		return 0, false, fmt.Errorf("store: truncation intent %s does not decode (%q): refusing to guess where the log ends", path, b[:n])
	}
	return off, true, nil
}

// replicaShownBefore is how far the recovery of a replica (or of a
// synchronous master: Config.ExternalReplication) dispatches: what it
// had shown before it stopped, as far as its files tell (the checkpoint's
// dispatched offset, the end of the newest ConsumeQueue entry), never the
// whole log: the rest waits until the master (a master's replicas)
// confirms it again, so a truncation after the restart never takes back a
// record a consumer read, and a master never shows a record no replica
// holds. The Replicated (= Confirmed) watermark starts there.
func (s *Store) replicaShownBefore(cp checkpoint, haveCP bool, from, end int64) int64 {
	shown := from
	if haveCP {
		shown = max(shown, cp.CQFlushed)
	}
	for _, r := range s.allQueues() {
		if e, ok := r.q.LastEntry(); ok {
			shown = max(shown, e.PhysOffset+int64(e.Size)+commitlog.TrailerBytes)
		}
	}
	shown = min(shown, end)
	s.marks.reported.Store(shown)
	s.marks.replicated.Store(shown)
	return shown
}

// StartReplicaAt makes an empty replica's log start at off (a segment
// start): where its master's log starts when retention deleted the
// segments before. The store must hold no record (ErrNotEmpty otherwise);
// afterwards its written, flushed, confirmed and visible offsets are off
// and the next AppendReplicated is at off. The new start is durable (an
// empty segment file at off, the checkpoint) before it returns.
func (s *Store) StartReplicaAt(off int64) error {
	if !s.cfg.Replica {
		return errors.New("store: StartReplicaAt on a store that is not a replica")
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	if w := s.log.WrittenOffset(); w != s.log.MinOffset() || w > off {
		return fmt.Errorf("%w: written %d, first offset %d, asked to start at %d", ErrNotEmpty, w, s.log.MinOffset(), off)
	}
	s.progressMu.Lock()
	defer s.progressMu.Unlock()
	if err := s.log.StartAt(off); err != nil {
		return err
	}
	s.dispatchMu.Lock()
	s.reader = s.log.NewFileReader(off)
	s.marks.visible.Advance(off)
	s.dispatchMu.Unlock()
	s.marks.reported.Store(max(s.marks.reported.Load(), off))
	s.marks.replicated.Advance(off)
	return s.persistProgressLocked()
}

// ErrNotEmpty: StartReplicaAt on a store that holds records.
var ErrNotEmpty = errors.New("store: the replica's log is not empty")

// Empty reports whether the CommitLog holds no record (its written offset
// is where it starts).
func (s *Store) Empty() bool { return s.log.WrittenOffset() == s.log.MinOffset() }

// capCheckpoint rewrites, at Open, a checkpoint whose offsets pass the
// recovered log end (a tail lost in a crash, or cut by a truncation): left
// alone, it would still say "every record below CQFlushed has its entries
// on disk" once the log has grown past that offset again with other
// records, and the next recovery after a crash would skip dispatching them
// (a gap in their queues). The ConsumeQueues and index were cut at end
// durably, so min(offset, end) is true of them.
func (s *Store) capCheckpoint(cp checkpoint, haveCP bool, end int64) error {
	if !haveCP || (cp.PhysFlushed <= end && cp.CQFlushed <= end && cp.IndexFlushed <= end) {
		return nil
	}
	cp.PhysFlushed, cp.CQFlushed, cp.IndexFlushed = min(cp.PhysFlushed, end), min(cp.CQFlushed, end), min(cp.IndexFlushed, end)
	cp.WrittenAtMs = s.cfg.Now().UnixMilli()
	return writeCheckpoint(s.cfg.FS, s.cfg.Dir, cp)
}
