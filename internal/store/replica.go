package store

import (
	"errors"
	"fmt"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/record"
)

// The replica side of replication: a store opened with Config.Replica
// takes its CommitLog from a master through AppendReplicated and refuses
// every put, so the log stays a byte-for-byte prefix of the master's. The
// dispatcher builds the ConsumeQueues and the index from the replicated
// records as from written ones (never past Confirmed).

// ErrReplica: a put on a replica's store. Its log is the master's.
var ErrReplica = errors.New("store: this store is a replica: its CommitLog is written by replication only")

// ErrReplicaNotAtEnd: AppendReplicated was given bytes for another offset
// than the end of the log.
var ErrReplicaNotAtEnd = commitlog.ErrNotAtEnd

// AppendReplicated appends raw, whole CommitLog entries as the master's
// log holds them (records with their CRC trailers, possibly ending with
// the blank marker that closes a segment; see commitlog.ReadRaw), at
// exactly off, which must be the written offset (ErrReplicaNotAtEnd
// otherwise). Every record is verified (size, CRC, type, structure, that
// it names off's position as its own) before a byte is written; a range
// that fails is refused whole with an error wrapping ErrCorrupt. It
// returns the new written offset; the dispatcher then makes the records
// visible as the flush mode allows. The queue-offset counters follow the
// records, so the store knows each queue's next offset. A range is
// admitted against the measured free space like a put (space.go): one
// that would leave less than the reserve free is refused with an error
// wrapping ErrDiskFull, nothing written, and so is every range while the
// store is full (see ReplicaSpace). Under SYNC_FLUSH the flusher is asked
// at once for the appended bytes, as a put's waiter asks (a synchronous
// master waits for them). A full disk met anyway is retryable
// (ErrNoSpace: nothing of raw was kept); any other write failure makes
// the store read-only. Only on a store opened with Config.Replica.
func (s *Store) AppendReplicated(off int64, raw []byte) (int64, error) {
	if !s.cfg.Replica {
		return 0, errors.New("store: AppendReplicated on a store that is not a replica")
	}
	s.appendMu.Lock()
	defer s.appendMu.Unlock()
	if err := s.writable(); err != nil {
		return 0, err
	}
	// One walk verifies every record (the CommitLog's, with the own-offset
	// check here) and admits the range before a byte is written; the
	// records it passed move the queue-offset counters once written.
	recs := s.replRecs[:0]
	defer func() { clear(recs); s.replRecs = recs[:0] }()
	end, err := s.log.AppendRawChecked(off, raw, func(pos int64, e []byte) error {
		if own := ownOffset(e); own != pos {
			return fmt.Errorf("store: replicated record at %d names offset %d: %w", pos, own, ErrCorrupt)
		}
		recs = append(recs, e[:len(e)-commitlog.TrailerBytes])
		return nil
	}, func() error {
		return s.admitReplicated(len(raw), len(recs)) // space_replica.go
	})
	if err != nil {
		switch {
		case errors.Is(err, ErrCorrupt), errors.Is(err, ErrDiskFull):
			// The own-offset check's and the admission's, as they are.
		case errors.Is(err, commitlog.ErrCorrupt):
			return 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
		case errors.Is(err, commitlog.ErrNoSpace):
			return 0, fmt.Errorf("%w: %w", ErrNoSpace, err)
		}
		return 0, err
	}
	for _, rec := range recs {
		s.followQueueOffsets(rec)
	}
	s.stats.putBytes.Add(int64(len(raw)))
	if s.cfg.FlushDiskType == SyncFlush {
		// The replica acknowledges flushed bytes: its fdatasync starts
		// now, overlapping its master's, not once a waiter asks for it.
		s.log.RequestFlush()
	}
	s.notifyDispatcher()
	return end, nil
}

// followQueueOffsets moves the counters of the queues rec is in past its
// queue offsets. appendMu is held.
func (s *Store) followQueueOffsets(rec []byte) {
	bump := func(topic string, qid int32, next int64) {
		byID := s.counterMap(topic)
		if byID[qid] < next {
			byID[qid] = next
		}
	}
	if recordType(rec) == record.RocketMQ {
		v := message.View(rec)
		bump(string(v.Topic()), v.QueueID(), v.QueueOffset()+1)
		return
	}
	n := record.Envelope(rec).Entries()
	record.Envelope(rec).EachDest(func(_ int, topic []byte, qid int32, qo, _ int64, _ int) error {
		bump(string(topic), qid, qo+n)
		return nil
	})
}

// ReadReplication returns whole CommitLog entries from off (an entry's
// offset or a segment start, such as a replica's log end) below the
// Written watermark, at most max bytes unless one entry is larger, and the
// offset after them: what a replica passes to AppendReplicated. It stops at
// the end of a segment and at limit (if > 0). buf is reused if large
// enough.
func (s *Store) ReadReplication(off, limit int64, max int, buf []byte) ([]byte, int64, error) {
	w := s.log.WrittenOffset()
	if limit <= 0 || limit > w {
		limit = w
	}
	return s.log.ReadRaw(off, limit, max, buf)
}

// ReadCommitLog reads len(p) raw bytes of the CommitLog at off (inside one
// segment, below the written offset), unverified: a replica's and its
// master's bytes at the same place are compared this way.
func (s *Store) ReadCommitLog(p []byte, off int64) error { return s.log.ReadAt(p, off) }

// SegmentBytes returns the CommitLog segment size (a master and its
// replicas must agree on it: segments end at the same offsets).
func (s *Store) SegmentBytes() int64 { return s.cfg.CommitLogSegmentBytes }

// waitsForConfirmed reports whether a put waits for Confirmed before it is
// acknowledged: under SYNC_FLUSH, and under ASYNC_FLUSH with
// ExternalReplication (a synchronous master acknowledges once the replicas
// have the message, whatever the local flush mode).
func (s *Store) waitsForConfirmed() bool {
	return s.cfg.FlushDiskType == SyncFlush || s.cfg.ExternalReplication
}

// localConfirmed is how far the local log goes toward Confirmed: Flushed
// under SYNC_FLUSH, Written under ASYNC_FLUSH.
func (s *Store) localConfirmed() int64 {
	if s.cfg.FlushDiskType == SyncFlush {
		return s.log.FlushedOffset()
	}
	return s.log.WrittenOffset()
}

// LocalStage is the watermark the local log confirms a put at: Flushed
// under SYNC_FLUSH, Written under ASYNC_FLUSH. A replication service that
// confirms for the master alone (an ASYNC_MASTER under a lease) waits on
// it.
func (s *Store) LocalStage() Watermark {
	if s.cfg.FlushDiskType == SyncFlush {
		return Flushed
	}
	return Written
}

// confirmTimeout bounds a put's wait for Confirmed.
func (s *Store) confirmTimeout() time.Duration {
	if s.cfg.ExternalReplication && s.cfg.ReplicationTimeout > 0 {
		return s.cfg.ReplicationTimeout
	}
	return s.cfg.SyncFlushTimeout
}

// confirmResult is flushResult for a put ending at end: a timeout with the
// local part done is the replicas' (PutFlushSlaveTimeout).
func (s *Store) confirmResult(end int64, err error) PutResult {
	r := flushResult(err)
	if r.Status == PutFlushDiskTimeout && s.cfg.ExternalReplication && s.localConfirmed() >= end {
		return PutResult{Status: PutFlushSlaveTimeout, Err: fmt.Errorf("store: replicas did not confirm offset %d in %v: %w", end, s.confirmTimeout(), err)}
	}
	return r
}
