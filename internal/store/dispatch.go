package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
)

// confirmedLimit is how far the dispatcher may go: the Confirmed
// watermark (Replicated under SYNC_FLUSH, Written under ASYNC_FLUSH).
func (s *Store) confirmedLimit() int64 { return s.marks.confirmed.Load() }

// runDispatcher dispatches new records when the CommitLog notifies, and
// retries a round the disk refused every FlushConsumeQueueInterval.
func (s *Store) runDispatcher() {
	t := time.NewTicker(s.cfg.FlushConsumeQueueInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
			s.dispatchRound()
		case <-t.C:
			if s.Err() == nil && s.dispatchStalled.Load() {
				s.dispatchRound() // retry: no new write may come to kick
			}
		}
	}
}

// runPersister persists ConsumeQueue/index progress and the checkpoint every
// FlushConsumeQueueInterval. It has its own goroutine because a round is
// several fdatasyncs (milliseconds): on the dispatcher's goroutine it held
// back every message dispatched meanwhile, the end-to-end latency tail.
// ConsumeQueue and index Flush run concurrently with their appends.
func (s *Store) runPersister() {
	t := time.NewTicker(s.cfg.FlushConsumeQueueInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if s.Err() != nil {
				continue
			}
			err := s.persistProgress()
			s.noteWriteFault(&s.progressStalled, "persist consume queues, index and checkpoint", err)
		}
	}
}

// dispatchRound dispatches what is available; a write that found the disk
// full is retried later, any other failure makes the store read-only.
func (s *Store) dispatchRound() {
	s.updateReplicated()
	s.noteWriteFault(&s.dispatchStalled, "dispatch", s.dispatchAvailable())
}

// noteWriteFault handles the outcome of a dispatch or persist round: nil
// ends a stall (logged), a retryable lack of space starts or continues one
// (logged once; the round is retried), anything else fails the store.
func (s *Store) noteWriteFault(stalled *atomic.Bool, what string, err error) {
	switch {
	case err == nil:
		if stalled.Swap(false) {
			s.logger.Info("store: "+what+" works again after the disk was full", "visible", s.VisibleOffset())
		}
	case retryableNoSpace(err):
		if !stalled.Swap(true) {
			s.logger.Warn("store: "+what+" stalled: disk full; retrying every round (readers see what is dispatched)",
				"err", err, "retry_interval", s.cfg.FlushConsumeQueueInterval)
		}
	default:
		s.fail(err)
	}
}

// joinFaults joins errs; if any is not retryableNoSpace, only those are
// kept, so that the result is retryable only if all were.
func joinFaults(errs []error) error {
	var fatal []error
	for _, err := range errs {
		if !retryableNoSpace(err) {
			fatal = append(fatal, err)
		}
	}
	if len(fatal) > 0 {
		return errors.Join(fatal...)
	}
	return errors.Join(errs...)
}

// retryableNoSpace reports whether err is a write, a truncation or a file
// creation that failed because the disk (or quota) is full. Such a failure
// leaves the page cache consistent, and the ConsumeQueues, the index and
// the checkpoint are derived from the CommitLog, so the operation can
// simply be tried again. A failed fdatasync (whatever its errno) or
// directory sync never is: the page cache cannot be trusted after it.
func retryableNoSpace(err error) bool {
	if !commitlog.IsNoSpace(err) {
		return false
	}
	var pe *os.PathError
	if !errors.As(err, &pe) {
		return false
	}
	switch pe.Op {
	case "write", "truncate", "open":
		return true
	}
	return false
}

// dispatchAvailable dispatches every record below Confirmed.
// The waiters of Visible are called back after dispatchMu is released.
func (s *Store) dispatchAvailable() error {
	s.dispatchMu.Lock()
	err := s.dispatchTo(s.confirmedLimit())
	s.dispatchMu.Unlock()
	s.marks.visible.Release()
	return err
}

// dispatchTo dispatches records up to limit, moving Visible (its waiters
// are the caller's to release, without dispatchMu). dispatchMu is held.
func (s *Store) dispatchTo(limit int64) error {
	if p := s.failure.Load(); p != nil {
		return nil // already failed: leave the queues as they are
	}
	for {
		rec, phys, err := s.nextToDispatch(limit) // isolate.go
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("store: dispatch at offset %d: %w", s.reader.Offset(), err)
		}
		if err := s.dispatchRecord(rec, phys); err != nil {
			if retryableNoSpace(err) {
				// Dispatch it again next round; the entries it already got
				// are re-appended idempotently.
				s.reader = s.log.NewFileReader(phys)
			}
			return err
		}
		s.marks.visible.Advance(s.reader.Offset())
	}
	s.marks.visible.Advance(s.reader.Offset())
	return nil
}

// queueForDispatch returns the ConsumeQueue of (topic, queueID), opening or
// creating it. Only the dispatcher (or recovery) creates queues.
func (s *Store) queueForDispatch(topic []byte, queueID int32) (*consumequeue.Queue, error) {
	s.qmu.RLock()
	q := s.queues[string(topic)][queueID]
	s.qmu.RUnlock()
	if q != nil {
		return q, nil
	}
	return s.openQueue(string(topic), queueID)
}

func (s *Store) openQueue(topic string, queueID int32) (*consumequeue.Queue, error) {
	q, err := consumequeue.Open(consumequeue.Config{
		FS: s.cfg.FS, Dir: s.queueDir(topic, queueID), Topic: topic, QueueID: queueID,
		EntriesPerSegment: s.cfg.ConsumeQueueSegmentEntries, Logger: s.logger,
	})
	if err != nil {
		return nil, fmt.Errorf("store: open consume queue %s/%d: %w", topic, queueID, err)
	}
	s.qmu.Lock()
	byID := s.queues[topic]
	if byID == nil {
		byID = map[int32]*consumequeue.Queue{}
		s.queues[topic] = byID
	}
	byID[queueID] = q
	s.qmu.Unlock()
	return q, nil
}

func (s *Store) queueDir(topic string, queueID int32) string {
	return filepath.Join(s.cfg.Dir, consumeQueueDir, topic, strconv.Itoa(int(queueID)))
}

// allQueues returns every open ConsumeQueue with its topic and queue id.
func (s *Store) allQueues() []queueRef {
	s.qmu.RLock()
	defer s.qmu.RUnlock()
	var out []queueRef
	for topic, byID := range s.queues {
		for id, q := range byID {
			out = append(out, queueRef{topic, id, q})
		}
	}
	return out
}

type queueRef struct {
	topic string
	id    int32
	q     *consumequeue.Queue
}

// persistProgress flushes the ConsumeQueues and the index and writes the
// checkpoint: every entry for records below the dispatched offset read
// before the flushes is durable once they return.
func (s *Store) persistProgress() error {
	s.progressMu.Lock()
	defer s.progressMu.Unlock()
	return s.persistProgressLocked()
}

// persistProgressLocked is persistProgress with progressMu held.
func (s *Store) persistProgressLocked() error {
	s.dispatchMu.Lock()
	d, ts := s.VisibleOffset(), s.lastTs
	s.dispatchMu.Unlock()
	physFlushed := s.log.FlushedOffset()
	if err := s.flushQueuesAndIndex(); err != nil {
		return fmt.Errorf("store: flush consume queues and index: %w", err)
	}
	cp := checkpoint{PhysFlushed: physFlushed, CQFlushed: d, IndexFlushed: d, LastStoreTsMs: ts}
	if s.lastCheckpoint != nil && *s.lastCheckpoint == cp {
		return nil // the file already says this, durably: an idle store writes nothing
	}
	written := cp
	cp.WrittenAtMs = s.cfg.Now().UnixMilli()
	if err := writeCheckpoint(s.cfg.FS, s.cfg.Dir, cp); err != nil {
		s.lastCheckpoint = nil
		return err
	}
	s.lastCheckpoint = &written
	return nil
}

// A persist round flushes the ConsumeQueues (each an fdatasync, and
// directory syncs for a new queue) with one worker per persistQueuesPerWorker
// queues, at most persistMaxWorkers. Concurrent fdatasyncs of different
// files share the filesystem's journal commits and the device's queue: one
// after another, the 4,000 queues of the many-topics workload took 1.6-2.9 s
// a round (17 s for the round that created them), so the checkpoint lagged
// seconds behind and a restart after a crash re-dispatched all of that; 16
// at a time, 0.24-0.40 s (10 s); 64, 0.11-0.26 s (2.3 s; this rule gives
// 63 workers for 4,000 queues). Up to persistQueuesPerWorker queues are
// still flushed one after another: a burst of concurrent fdatasyncs every
// second would queue ahead of a SYNC_FLUSH group commit's.
const (
	persistQueuesPerWorker = 64
	persistMaxWorkers      = 64
)

// flushQueuesAndIndex flushes every ConsumeQueue, then the index, and joins
// their errors (joinFaults).
func (s *Store) flushQueuesAndIndex() error {
	refs := s.allQueues()
	var (
		mu   sync.Mutex
		errs []error
		next atomic.Int64
		wg   sync.WaitGroup
	)
	note := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	workers := min(persistMaxWorkers, (len(refs)+persistQueuesPerWorker-1)/persistQueuesPerWorker)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(refs)); i = next.Add(1) - 1 {
				note(refs[i].q.Flush())
			}
		}()
	}
	wg.Wait()
	note(s.index.Flush())
	return joinFaults(errs)
}

// DeleteTopic removes the ConsumeQueues of topic (and their directory) and
// its queue offset counters, leaving a tombstone (tombstone.go). Its
// records stay in the CommitLog until retention removes them (so
// QueryByKey may still find them); they are never dispatched again.
func (s *Store) DeleteTopic(topic string) error {
	if s.cfg.Replica {
		// Its log is its master's: the topic's records stay the master's
		// to delete.
		return fmt.Errorf("store: delete topic %s: the store is a replica's", topic)
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil {
		return err
	}
	// Everything written must be dispatched first, so that no record of
	// the topic reaches a queue after it is deleted.
	if err := s.log.Flush(); err != nil {
		return fmt.Errorf("store: delete topic %s: %w", topic, err)
	}
	s.progressMu.Lock()
	defer s.progressMu.Unlock()
	s.dispatchMu.Lock()
	err := s.dispatchTo(s.confirmedLimit())
	if err == nil {
		// Durable before the queues go: no restart re-dispatches the
		// topic's records, and Check expects no entries for them. The
		// tombstone is at the written end (appendMu is held, nothing is
		// being written), not at Visible: on a synchronous master records
		// of the topic written before the deletion may not be replicated,
		// hence not dispatched, yet; dispatched later they would land in
		// the queues of a topic created again with the name.
		err = s.addTombstone(topic, s.log.WrittenOffset())
	}
	var qs map[int32]*consumequeue.Queue
	if err == nil {
		s.qmu.Lock()
		qs = s.queues[topic]
		delete(s.queues, topic)
		s.qmu.Unlock()
		delete(s.counters, topic)
	}
	s.dispatchMu.Unlock()
	s.marks.visible.Release()
	if err != nil {
		if !retryableNoSpace(err) {
			s.fail(err)
		}
		return err
	}
	var errs []error
	for _, q := range qs {
		errs = append(errs, q.Destroy())
	}
	s.removeTopicDir(topic)
	// The checkpoint moves past the topic's records so recovery does not
	// re-dispatch them.
	errs = append(errs, s.persistProgressLocked())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store: delete topic %s: %w", topic, err)
	}
	return nil
}
