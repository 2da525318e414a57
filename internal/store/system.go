package store

import (
	"fmt"
	"io"
	"time"

	"github.com/keelmq/keel/internal/store/record"
)

// System records (package record: the broker metadata that travels with
// the log) have no destinations: no ConsumeQueue entry, no index key, no
// reader sees them (LookMessageByOffset refuses them). The dispatcher
// checks each one's body (a version or kind this release does not know
// fails the store, never a skip) and hands it to the one SystemFunc
// subscribed, on master and replica alike; SubscribeSystem first replays
// the system records already dispatched from a given offset, so that a
// subscriber that persisted its state up to that offset (its snapshot
// point) misses none and sees none twice.

// SystemFunc receives the body of the system record at phys, whose entry
// ends at end (the CommitLog offset of the next entry: the snapshot point
// once it is applied). It runs on the dispatcher goroutine (or the
// caller of SubscribeSystem, for the replay) with no store lock a put
// takes; it must not block on the store's write path. An error fails the
// store (read-only), since state the log says changed would be missed.
type SystemFunc func(phys, end int64, body []byte) error

// SubscribeSystem calls fn for every system record dispatched from the
// CommitLog offset from (an entry start, typically a snapshot point
// returned by an earlier call of fn) up to what is dispatched now, then
// makes fn the subscriber of every system record dispatched after that,
// with no record missed or repeated in between. It returns the offset the
// replay ended at. A from below the log's first offset starts at the
// first offset (retention deleted the segments before it; see
// docs/replication.md for why no state is lost), and a from beyond what
// is dispatched replays nothing (the log lost an unsynced tail the
// snapshot already covers). One subscriber: a second call replaces it.
func (s *Store) SubscribeSystem(from int64, fn SystemFunc) (int64, error) {
	s.dispatchMu.Lock()
	defer s.dispatchMu.Unlock()
	to := s.reader.Offset()
	if s.cfg.ExternalReplication && !s.cfg.Replica {
		// A synchronous master's recovery dispatches only what it had
		// shown (recovery.go); the rest waits for the replicas. Its
		// metadata was applied in memory when it was written, though, and
		// the file that held it may have lost that write: replay to the
		// written end, and let the dispatcher skip those records later.
		to = max(to, s.log.WrittenOffset())
		s.sysReplayedTo = to
	}
	if minOff := s.log.MinOffset(); from < minOff {
		if from > 0 {
			s.logger.Warn("store: system records from before the log's first offset were deleted; replaying from the first offset",
				"from", from, "first_offset", minOff)
		}
		from = minOff
	}
	if from < to {
		r := s.log.NewReader(from)
		for {
			rec, phys, err := r.Next(to)
			if err == io.EOF {
				break
			}
			if err != nil {
				return r.Offset(), fmt.Errorf("store: replay system records at %d: %w", r.Offset(), err)
			}
			if recordType(rec) != record.System {
				continue
			}
			if err := s.applySystem(fn, rec, phys, r.Offset()); err != nil {
				return phys, err
			}
		}
	}
	s.sysFn = fn
	return max(from, to), nil
}

// dispatchSystem is dispatch of a system record: checked, then handed to
// the subscriber. dispatchMu is held.
func (s *Store) dispatchSystem(rec []byte, phys int64) error {
	if phys < s.sysReplayedTo {
		// SubscribeSystem already replayed it (a master's undispatched
		// tail): checked only.
		return s.applySystem(nil, rec, phys, s.reader.Offset())
	}
	return s.applySystem(s.sysFn, rec, phys, s.reader.Offset())
}

func (s *Store) applySystem(fn SystemFunc, rec []byte, phys, end int64) error {
	body := record.Envelope(rec).Body()
	if err := record.CheckSystem(body); err != nil {
		return fmt.Errorf("store: system record at %d: %w", phys, err)
	}
	if fn == nil {
		return nil
	}
	s.inSystemFn = true
	err := fn(phys, end, body)
	s.inSystemFn = false
	if err != nil {
		return fmt.Errorf("store: apply system record at %d: %w", phys, err)
	}
	return nil
}

// Replica reports whether the store was opened as a replica's (its log
// is written by replication only).
func (s *Store) Replica() bool { return s.cfg.Replica }

// ConfirmTimeout is how long a put waits for Confirmed before it is
// answered with a timeout (the replication timeout on a SYNC_MASTER, the
// flush timeout otherwise).
func (s *Store) ConfirmTimeout() time.Duration { return s.confirmTimeout() }

// RecoveredEnd returns the CommitLog's written end when recovery finished
// at Open. On a synchronous master (Config.ExternalReplication) the
// records between what it had shown and this end are dispatched only once
// the replicas confirm them, so Visible may stay below it for a while
// after a restart; a rebuild of state from the ConsumeQueues (such as
// Kafka's producer windows) must wait until Visible reaches it.
func (s *Store) RecoveredEnd() int64 { return s.recoveredEnd }
