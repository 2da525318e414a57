package kafka

// The transaction coordinator's state in the CommitLog (txn.go). Every
// change of a transactional.id's entry is one system record of kind
// record.KindKafkaTxn whose payload is this JSON:
//
//	{"e": <the whole new entry: id, pid, epoch, timeoutMs, state,
//	       startMs, parts [{t, p, q, s}], groups, offsets {group: [{t, p, o}]}>,
//	 "ab": [{t, q, pid, first, last}]   (the aborts a CompleteAbort closed)}
//
// so replaying the records in log order rebuilds the state (the last
// record of an id is its entry). The core passes these records over;
// they reach the slaves with the messages. Beside the log, the snapshot
// <DataDir>/config/kafkaTransactions.json holds the whole state and the
// CommitLog offset it reflects (its point, "keelLogOffset"): written
// (durably: temporary file, fsync, rename) after the start's replay,
// every Config.TxnSnapshotInterval while the state changes, and at Close,
// each time once the records up to its point are Confirmed. At start
// (Serve) the door loads the snapshot and replays the records from its
// point to the log's written end (store.ScanSystem); without a snapshot
// (the first start, a slave just promoted), or with one whose point is
// past the log's end, from the log's first offset.
// Aborts whose marker is below their partition's log start are dropped
// from the snapshot.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// txnAbortEntry is an abort of one partition, as logged.
type txnAbortEntry struct {
	Topic string `json:"t"`
	Queue int32  `json:"q"`
	PID   int64  `json:"pid"`
	First int64  `json:"first"`
	Last  int64  `json:"last"`
}

type txnRecord struct {
	E  *txnEntry       `json:"e"`
	AB []txnAbortEntry `json:"ab,omitempty"`
}

type txnSnapshot struct {
	Point   int64           `json:"keelLogOffset"`
	Txns    []*txnEntry     `json:"transactions"`
	Aborted []txnAbortEntry `json:"aborted"`
}

// logTxnWait appends the record of next (and the aborts ab), makes it the
// entry of its id, and waits until the record is Confirmed. The slot's
// mutex is held. A refused append or a confirmation that does not come
// answers COORDINATOR_NOT_AVAILABLE (clients retry), as Kafka answers a
// failed write of its transaction log.
func (s *Server) logTxnWait(next *txnEntry, ab []txnAbortEntry) int16 {
	next.UpdatedMs = s.parts.now().UnixMilli()
	payload, err := json.Marshal(txnRecord{E: next, AB: ab})
	if err != nil {
		return errKafkaStorage
	}
	rec, err := record.AppendSystemRecord(nil, &record.SystemRecord{Kind: record.KindKafkaTxn, Payload: payload})
	if err != nil {
		s.log.Error("kafka: transaction record", "transactional_id", next.ID, "err", err)
		return errKafkaStorage
	}
	c := s.txn
	c.mu.Lock()
	r, _, end := s.st.AppendRecord(s.ctx, rec)
	if !r.OK() {
		c.mu.Unlock()
		s.log.Warn("kafka: transaction record refused by the store", "transactional_id", next.ID, "status", r.Status, "err", r.Err)
		if !s.leads() {
			return errNotCoordinator
		}
		return errCoordinatorNotAvailable // retriable, as Kafka answers a failed append to its transaction log
	}
	c.installLocked(next, ab)
	c.lastEnd = max(c.lastEnd, end)
	c.mu.Unlock()
	if next.State == txnOngoing {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	timeout := s.st.ConfirmTimeout()
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	if err := s.st.WaitFor(s.ctx, store.Confirmed, end, timeout); err != nil {
		s.log.Warn("kafka: transaction record not confirmed", "transactional_id", next.ID, "err", err)
		// In memory and in the log already: a retry goes on from it.
		return errCoordinatorNotAvailable
	}
	return errNone
}

func (s *Server) txnSnapshotPath() string {
	if s.cfg.DataDir == "" || s.cfg.FS == nil {
		return ""
	}
	return filepath.Join(s.cfg.DataDir, "config", "kafkaTransactions.json")
}

// loadTxns reads the snapshot and replays the records after its point.
func (s *Server) loadTxns() error {
	c := s.txn
	from := int64(0)
	if path := s.txnSnapshotPath(); path != "" {
		data, err := readWhole(s.cfg.FS, path)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return fmt.Errorf("kafka: transactions: %w", err)
		default:
			var snap txnSnapshot
			if err := json.Unmarshal(data, &snap); err != nil {
				return fmt.Errorf("kafka: transactions: parse %s: %w", path, err)
			}
			if end := s.st.Offset(store.Written); snap.Point > end {
				// The log ends before what the snapshot reflects (cut
				// since, as a slave's truncation does): read it all.
				s.log.Warn("kafka: transactions snapshot ahead of the CommitLog; replaying the log from its start", "point", snap.Point, "log_end", end)
				break
			}
			for _, e := range snap.Txns {
				if e == nil || e.ID == "" || e.State > txnCompleteAbort {
					return fmt.Errorf("kafka: transactions: %s: an entry that does not parse: %+v", path, e)
				}
			}
			c.mu.Lock()
			for _, e := range snap.Txns {
				c.installLocked(e, nil)
			}
			for _, a := range snap.Aborted {
				k := queueKey{a.Topic, a.Queue}
				c.aborted[k] = append(c.aborted[k], abortedTxn{PID: a.PID, First: a.First, Last: a.Last})
			}
			c.mu.Unlock()
			from = snap.Point
		}
	}
	end, err := s.st.ScanSystem(from, func(phys, end int64, body []byte) error {
		r, err := record.DecodeSystem(body)
		if err != nil || r.Kind != record.KindKafkaTxn {
			return err
		}
		var tr txnRecord
		if err := json.Unmarshal(r.Payload, &tr); err != nil || tr.E == nil || tr.E.ID == "" || tr.E.State > txnCompleteAbort {
			return fmt.Errorf("kafka: transaction record at %d does not parse: %v", phys, err)
		}
		c.mu.Lock()
		c.installLocked(tr.E, tr.AB)
		c.mu.Unlock()
		return nil
	})
	if err != nil {
		return fmt.Errorf("kafka: transactions: replay from the CommitLog: %w", err)
	}
	c.mu.Lock()
	c.lastEnd = end
	c.dirty = true
	n := len(c.byID)
	c.mu.Unlock()
	s.log.Info("kafka: transactions replayed from the CommitLog", "from", from, "to", end, "transactional_ids", n)
	if n > 0 || end > from {
		select { // a snapshot at the replay's end, so the next start reads less
		case c.changed <- struct{}{}:
		default:
		}
	}
	s.txnLoaded.Store(true)
	return nil
}

// snapshotTxns forgets the expired transactional ids and writes the
// snapshot if the state changed since the last one, once the records it
// reflects are Confirmed.
func (s *Server) snapshotTxns(ctx context.Context) error {
	path := s.txnSnapshotPath()
	c := s.txn
	s.txnSnapMu.Lock()
	defer s.txnSnapMu.Unlock()
	c.mu.Lock()
	s.expireTxnIDsLocked(s.parts.now().UnixMilli())
	if path == "" || !c.dirty {
		c.dirty = c.dirty && path != ""
		c.mu.Unlock()
		return nil
	}
	snap := txnSnapshot{Point: c.lastEnd, Txns: []*txnEntry{}, Aborted: []txnAbortEntry{}}
	for _, id := range slices.Sorted(maps.Keys(c.byID)) {
		if e := c.byID[id].e; e != nil {
			snap.Txns = append(snap.Txns, e)
		}
	}
	for k, list := range c.aborted {
		start := s.st.MinOffset(k.topic, k.queueID)
		kept := list[:0]
		for _, a := range list {
			if a.Last >= start {
				kept = append(kept, a)
				snap.Aborted = append(snap.Aborted, txnAbortEntry{Topic: k.topic, Queue: k.queueID, PID: a.PID, First: a.First, Last: a.Last})
			}
		}
		c.aborted[k] = kept
	}
	c.dirty = false
	c.mu.Unlock()
	slices.SortFunc(snap.Aborted, func(a, b txnAbortEntry) int {
		if a.Topic != b.Topic {
			return strings.Compare(a.Topic, b.Topic)
		}
		if a.Queue != b.Queue {
			return int(a.Queue - b.Queue)
		}
		return int(a.Last - b.Last)
	})
	data, err := json.Marshal(snap)
	if err == nil {
		// The snapshot must not claim more than the log keeps.
		err = s.st.WaitFor(ctx, store.Confirmed, snap.Point, 30*time.Second)
	}
	if err == nil {
		dir := filepath.Dir(path)
		if _, serr := s.cfg.FS.Stat(dir); serr != nil {
			err = vfs.MkdirAllDurable(s.cfg.FS, dir, 0o755)
		}
	}
	if err == nil {
		err = vfs.WriteFileDurable(s.cfg.FS, path, data, 0o644)
	}
	if err != nil {
		c.mu.Lock()
		c.dirty = true
		c.mu.Unlock()
		return fmt.Errorf("kafka: transactions snapshot: %w", err)
	}
	return nil
}

// runTxnSnapshots writes the snapshot Config.TxnSnapshotInterval after
// a change (at most once per interval); it sleeps while nothing changes.
func (s *Server) runTxnSnapshots() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.txn.changed:
		}
		t := time.NewTimer(s.cfg.TxnSnapshotInterval)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		if err := s.snapshotTxns(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("kafka: transactions snapshot not written", "err", err)
			select { // tried again after the next interval
			case s.txn.changed <- struct{}{}:
			default:
			}
		}
	}
}

// readWhole reads the file at path.
func readWhole(fs vfs.FS, path string) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data, nil
}

// closeTxns writes the snapshot a last time (Close, the store still
// open), if the state changed since the last one.
func (s *Server) closeTxns() {
	if !s.txnLoaded.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.snapshotTxns(ctx); err != nil {
		s.log.Warn("kafka: transactions snapshot not written at close", "err", err)
	}
}
