package store

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/store/index"
	"github.com/keelmq/keel/internal/vfs"
)

// Paths inside Config.Dir.
const (
	commitLogDir    = "commitlog"
	consumeQueueDir = "consumequeue"
	indexDir        = "index"
	quarantineDir   = "quarantine"
	abortName       = "abort"
	lockName        = "lock"
)

// Errors.
var (
	ErrClosed   = errors.New("store: closed")
	ErrReadOnly = errors.New("store: read-only after a write or fsync failure (restart to recover)")
	ErrDiskFull = errors.New("store: not enough free disk space; writes refused")
	ErrCorrupt  = errors.New("store: corrupt record")
	// ErrNoSpace: a write found the disk full. The message was not stored;
	// later puts try again.
	ErrNoSpace = errors.New("store: disk full (no space left on device): message not stored, retry when space is freed")
)

// Store ties the CommitLog, the ConsumeQueues and the index together. See
// the package documentation.
type Store struct {
	cfg    Config
	logger *slog.Logger
	log    *commitlog.Log
	index  *index.Index
	lock   io.Closer

	recovered commitlog.RecoverResult // what Open's recovery found

	// Append side. appendMu is held by the one goroutine writing a combined
	// batch; pendMu guards the requests waiting to be combined.
	appendMu sync.Mutex
	counters map[string]map[int32]int64 // next queue offset; guarded by appendMu
	pendMu   sync.Mutex
	pending  []*putReq // guarded by pendMu
	spare    []*putReq // reused for the batch taken from pending; guarded by appendMu
	replRecs [][]byte  // a replicated range's records (AppendReplicated); guarded by appendMu
	// Group commit: puts between encoding and the end of their append, and
	// the flusher waiting for them (gatherFlush).
	appending  atomic.Int64
	gatherWait atomic.Bool
	appendIdle chan struct{} // capacity 1
	// The puts (stats.puts) when the last flush ended (flushEnded) and
	// when the last gatherFlush returned, and how many came between the
	// two gatherFlush returns before it (the group the last flush took).
	putsAtFlushEnd atomic.Int64
	putsAtGather   int64 // the flusher's goroutine only
	lastGroup      int64 // the flusher's goroutine only
	// Scratch of a combined write; guarded by appendMu.
	batchRecs [][]byte
	batchMsgs []*message.Message

	// Dispatch side. dispatchMu is held by the dispatcher while it changes
	// ConsumeQueues and the index, and by operations that must exclude it.
	dispatchMu sync.Mutex
	reader     *commitlog.Reader // guarded by dispatchMu
	lastTs     int64             // store timestamp of the last dispatched record; guarded by dispatchMu
	ix         indexing          // indexEnvelope's state (types.go); guarded by dispatchMu
	tombstones map[string]int64  // deleted topics (tombstone.go); guarded by dispatchMu
	sysFn      SystemFunc        // the system records' subscriber (system.go); guarded by dispatchMu
	inSystemFn bool              // a SystemFunc runs (DeleteReplicatedTopic); guarded by dispatchMu
	// During recovery's re-dispatch, records below these offsets already
	// have their ConsumeQueue (index) entries. Zero afterwards.
	rebuildCQFrom, rebuildIndexFrom int64 // guarded by dispatchMu
	// sysReplayedTo: system records below it were handed to the
	// SystemFunc by SubscribeSystem's replay past what was dispatched (a
	// synchronous master's recovered tail); guarded by dispatchMu.
	sysReplayedTo int64
	// recoveredEnd: the CommitLog's written end when recovery finished.
	recoveredEnd int64
	qmu          sync.RWMutex
	queues       map[string]map[int32]*consumequeue.Queue // guarded by qmu

	// The replicated, confirmed and visible watermarks, and the
	// subscribers of visible (watermarks.go). Visible is moved by the
	// dispatcher only (the CommitLog offset dispatched so far).
	marks marks

	// progressMu serializes persistProgress, retention and DeleteTopic
	// (lock order: appendMu, progressMu, dispatchMu, qmu).
	progressMu sync.Mutex
	// lastCheckpoint is what the last persist round wrote to the
	// checkpoint file, WrittenAtMs left zero (nil: unknown, write the next
	// round); a round with the same offsets skips the write. Guarded by
	// progressMu.
	lastCheckpoint *checkpoint
	space          spaceState // space.go
	// Retention under disk pressure (pressure.go).
	consumerOffsets atomic.Pointer[ConsumerOffsetsFunc]
	pressureKept    atomic.Pointer[string] // why the oldest segment was kept, as last logged (pressure.go); nil: not kept
	queueHolds      atomic.Pointer[QueueHoldsFunc]
	ageHolds        atomic.Pointer[QueueHoldsFunc] // holds.go: kept from age retention only
	retentionHeld   atomic.Int64                   // 1 + the CommitLog offset a hold last kept expired segments at (holds.go; 0: none yet); logged once each

	putGate atomic.Pointer[func() PutResult] // asked before every put (gate.go)

	failure  atomic.Pointer[error] // sticky read-only cause
	diskFull atomic.Pointer[error] // non-nil while above the hard limit
	// diskCheckedAt is when checkDisk last ran (Unix nanoseconds).
	diskCheckedAt atomic.Int64
	closed        atomic.Bool

	// The dispatcher, or the persisting of its progress, is waiting for
	// disk space (retried every FlushConsumeQueueInterval).
	dispatchStalled, progressStalled atomic.Bool

	kick      chan struct{} // wakes the dispatcher
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	stats storeStats
	iso   isolation // isolated corrupt records (isolate.go)
	scrub scrubber  // the background scrubber's state (scrub.go)
	// scrubWake wakes a parked scrubber: a registry write failed.
	scrubWake chan struct{}
}

type storeStats struct {
	puts, putMsgs, putBytes atomic.Int64
	gets, getMsgs           atomic.Int64
	corruptReads            atomic.Int64
	// Unconsumed messages (and the segments holding them) deleted for
	// disk pressure.
	unconsumedDeleted, unconsumedSegments atomic.Int64
	readFaults, isolated                  atomic.Int64 // isolate.go
	readsLent                             atomic.Int64 // GetResults holding buffers, not yet released
	delayedCommits                        atomic.Int64 // fdatasyncs that waited CommitDelay
}

// Open validates cfg, takes the directory lock, recovers the store and
// starts its goroutines (flusher, dispatcher, retention).
func Open(cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{
		cfg:        cfg,
		logger:     cfg.Logger,
		counters:   map[string]map[int32]int64{},
		queues:     map[string]map[int32]*consumequeue.Queue{},
		kick:       make(chan struct{}, 1),
		appendIdle: make(chan struct{}, 1),
		scrubWake:  make(chan struct{}, 1),
		stop:       make(chan struct{}),
	}
	if err := s.open(); err != nil {
		s.closeResources()
		return nil, err
	}
	s.start()
	return s, nil
}

func (s *Store) path(name string) string { return filepath.Join(s.cfg.Dir, name) }

func (s *Store) open() error {
	if err := vfs.MkdirAllDurable(s.cfg.FS, s.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	lock, err := s.cfg.FS.Lock(s.path(lockName))
	if err != nil {
		return fmt.Errorf("store: lock %s: %w", s.cfg.Dir, err)
	}
	s.lock = lock
	crashed, err := s.markRunning()
	if err != nil {
		return err
	}
	if err := s.finishTruncation(); err != nil { // truncate.go
		return err
	}
	s.log, err = commitlog.Open(commitlog.Config{
		FS: s.cfg.FS, Dir: s.path(commitLogDir), SegmentBytes: s.cfg.CommitLogSegmentBytes,
		CheckRecord: checkRecord, Notify: s.notifyDispatcher, Logger: s.logger,
		MaxRecordBytes: s.cfg.maxRecordBytes(), OnFlush: s.onFlush, BeforeFlush: s.beforeFlush(),
		AfterFlushed: s.afterFlushed(),
		// Under SYNC_FLUSH, Confirmed (the dispatcher's limit) is Flushed
		// or below it: a write alone gives the dispatcher nothing to do.
		NotifyFlushedOnly: s.cfg.FlushDiskType == SyncFlush,
		PrefillBytes:      s.cfg.prefillBytes(),
		CacheWindowBytes:  s.cfg.CommitLogCacheBytes,
		ReadWindowBytes:   s.cfg.readWindowBytes(),
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s.initMarks()
	if err := s.loadIsolated(); err != nil { // isolate.go
		return err
	}
	return s.recover(crashed)
}

// markRunning creates the abort marker and reports whether it was already
// there (the previous run did not close cleanly).
func (s *Store) markRunning() (bool, error) {
	path := s.path(abortName)
	_, err := s.cfg.FS.Stat(path)
	crashed := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("store: stat %s: %w", path, err)
	}
	if !crashed {
		f, err := s.cfg.FS.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return false, fmt.Errorf("store: create %s: %w", path, err)
		}
		f.Close()
		if err := s.cfg.FS.SyncDir(s.cfg.Dir); err != nil {
			return false, fmt.Errorf("store: sync dir %s: %w", s.cfg.Dir, err)
		}
	}
	return crashed, nil
}

func (s *Store) start() {
	interval := s.cfg.FlushInterval
	s.wg.Add(8)
	go func() { defer s.wg.Done(); s.log.RunFlusher(s.stop, interval) }()
	go func() { defer s.wg.Done(); s.log.RunAcknowledger(s.stop) }()
	go func() { defer s.wg.Done(); s.log.RunPrefiller(s.stop) }()
	go func() { defer s.wg.Done(); s.log.RunCacheTrimmer(s.stop) }()
	go func() { defer s.wg.Done(); s.runDispatcher() }()
	go func() { defer s.wg.Done(); s.runPersister() }()
	go func() { defer s.wg.Done(); s.runRetention() }()
	go func() { defer s.wg.Done(); s.runScrubber() }() // scrub.go
}

// Close stops the goroutines, flushes everything, writes the checkpoint,
// removes the abort marker (only if all of that succeeded) and releases the
// lock. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.appendMu.Lock() // wait for the writer in progress; later puts see closed
		close(s.stop)
		s.wg.Wait()
		err := s.shutdownFlush()
		if err == nil {
			err = s.removeAbortMarker()
		} else {
			s.logger.Error("store: unclean close; the next open recovers as after a crash", "err", err)
		}
		s.appendMu.Unlock()
		s.closeErr = errors.Join(err, s.closeResources())
	})
	return s.closeErr
}

func (s *Store) shutdownFlush() error {
	if s.Err() != nil {
		return s.Err()
	}
	if err := s.log.Flush(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	if err := s.log.TrimPrefill(); err != nil {
		return fmt.Errorf("store: close: %w", err)
	}
	if err := s.dispatchAvailable(); err != nil {
		return err
	}
	return s.persistProgress()
}

func (s *Store) removeAbortMarker() error {
	if err := s.cfg.FS.Remove(s.path(abortName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: remove abort marker: %w", err)
	}
	if err := s.cfg.FS.SyncDir(s.cfg.Dir); err != nil {
		return fmt.Errorf("store: sync dir %s: %w", s.cfg.Dir, err)
	}
	return nil
}

func (s *Store) closeResources() error {
	var errs []error
	if s.log != nil && s.marks.visible != nil {
		s.closeMarks()
	}
	s.qmu.Lock()
	for _, byID := range s.queues {
		for _, q := range byID {
			errs = append(errs, q.Close())
		}
	}
	s.queues = map[string]map[int32]*consumequeue.Queue{}
	s.qmu.Unlock()
	if s.index != nil {
		errs = append(errs, s.index.Close())
	}
	if s.log != nil {
		errs = append(errs, s.log.Close())
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
	}
	return errors.Join(errs...)
}

// Err returns nil, or why the store is read-only.
func (s *Store) Err() error {
	if p := s.failure.Load(); p != nil {
		return *p
	}
	if err := s.log.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	return nil
}

// fail makes the store read-only.
func (s *Store) fail(err error) {
	wrapped := fmt.Errorf("%w: %w", ErrReadOnly, err)
	if s.failure.CompareAndSwap(nil, &wrapped) {
		s.logger.Error("store: read-only until restart", "err", err)
	}
}

func (s *Store) notifyDispatcher() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// SyncFlush reports whether puts are acknowledged only after an fdatasync
// (SYNC_FLUSH): whether PutMessagesDeferred can leave a put pending.
func (s *Store) SyncFlush() bool { return s.cfg.FlushDiskType == SyncFlush }

// Stats is a snapshot of the store's counters and offsets.
type Stats struct {
	// The watermarks (see Watermark) and the first offset held.
	WrittenOffset, FlushedOffset, ReplicatedOffset, ConfirmedOffset, VisibleOffset, MinOffset int64
	Puts, PutMessages, PutBytes                                                               int64
	Gets, GetMessages, CorruptReads                                                           int64
	// ReadsLent is the number of GetResults holding read buffers that have
	// not been released yet (a steady rise means a leak).
	ReadsLent int64
	// WindowHits and WindowMisses count the CommitLog reads of consumers
	// and replication served from the read window (memory) and from the
	// file (pread).
	WindowHits, WindowMisses int64
	// DelayedCommits counts the fdatasyncs that waited CommitDelay first.
	DelayedCommits int64
	ReadOnly       error
	DiskFull       bool
	// UnconsumedDeleted counts the messages consumer groups had not
	// consumed that retention deleted for disk pressure (each logged at
	// ERROR), in UnconsumedDeletedSegments segments; see pressure.go.
	UnconsumedDeleted, UnconsumedDeletedSegments int64
	// WriteStalled: dispatching to the ConsumeQueues and index, or
	// persisting their progress, found the disk full and is retried every
	// FlushConsumeQueueInterval (readers see what was dispatched).
	WriteStalled bool
}

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() Stats {
	hits, misses := s.log.WindowReads()
	return Stats{
		WindowHits: hits, WindowMisses: misses,
		WrittenOffset: s.log.WrittenOffset(), FlushedOffset: s.log.FlushedOffset(),
		ReplicatedOffset: s.Offset(Replicated), ConfirmedOffset: s.Offset(Confirmed), VisibleOffset: s.VisibleOffset(),
		MinOffset: s.log.MinOffset(),
		Puts:      s.stats.puts.Load(), PutMessages: s.stats.putMsgs.Load(), PutBytes: s.stats.putBytes.Load(),
		Gets: s.stats.gets.Load(), GetMessages: s.stats.getMsgs.Load(), CorruptReads: s.stats.corruptReads.Load(),
		ReadsLent: s.stats.readsLent.Load(), DelayedCommits: s.stats.delayedCommits.Load(),
		UnconsumedDeleted: s.stats.unconsumedDeleted.Load(), UnconsumedDeletedSegments: s.stats.unconsumedSegments.Load(),
		ReadOnly: s.Err(), DiskFull: s.diskFull.Load() != nil,
		WriteStalled: s.dispatchStalled.Load() || s.progressStalled.Load(),
	}
}
