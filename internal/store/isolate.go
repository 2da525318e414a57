package store

// Isolation of corrupt records. A record that fails verification when a
// consumer reads it is never served (promise 2), but it must not hold back
// the intact records behind it either: GetMessage skips it and returns the
// next ones, with a NextOffset past it, so a consumer moves on. Every such
// record is written to a small registry, <Dir>/isolated.json (rewritten
// whole, crash-safely, with vfs.WriteFileDurable), counted, logged at
// ERROR once and listed to operators (Store.Isolated; the broker's
// LIST_ISOLATED_RECORDS request, `keel corrupt list`, the console). The
// corrupt bytes stay where they are for inspection: nothing here writes to
// the CommitLog or the ConsumeQueues.
//
// Before isolating, the entry is read once more around the page cache
// (commitlog.RereadEntry): if that copy verifies, the fault was in the
// read, not in the data; the record is served, nothing is isolated, and
// the log line says so. A read fault does not make the store read-only:
// the data on disk is intact and no write failed.
//
// The skip does not depend on the registry: a record that fails
// verification twice is skipped whether or not the registry could be
// written (a full disk must not block the queue either); a registry write
// that failed is retried with the next isolation and by the scrubber.
//
// An isolated record is lost to consumers (its neighbours are not) until
// it is repaired offline: from a replica that holds it intact
// (fromreplica.go, which drops it from the registry), or, with no replica,
// by an Open with RepairCorruption, which replaces it by a hole record
// (isolate_repair.go).

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/vfs"
)

const (
	isolatedName = "isolated.json"
	// maxIsolatedRecords bounds the registry. When it is full, entries
	// whose CommitLog segment retention has removed make room; if none
	// has, a new record is still skipped, counted and logged, but not
	// listed.
	maxIsolatedRecords = 10_000
)

// Who found an isolated record.
const (
	FoundByRead  = "read"  // a consumer's read (GetMessage)
	FoundByScrub = "scrub" // the background scrubber
)

// IsolatedRecord is a record withheld from consumers because it failed
// verification. A record the scrubber found in the CommitLog whose queue
// could not be told from its damaged header has QueueID and QueueOffset -1
// and no Topic until a consumer's read reaches it.
type IsolatedRecord struct {
	Topic       string    `json:"topic"`
	QueueID     int32     `json:"queueId"`
	QueueOffset int64     `json:"queueOffset"`
	PhysOffset  int64     `json:"commitLogOffset"`
	Size        int32     `json:"size"`
	FoundAt     time.Time `json:"foundAt"`
	FoundBy     string    `json:"foundBy"`
	Reason      string    `json:"reason"`
}

func (r IsolatedRecord) queueKnown() bool { return r.QueueID >= 0 }

// isolation is the registry of isolated records.
type isolation struct {
	mu    sync.Mutex // held across the registry file's write (serialises writers)
	recs  []IsolatedRecord
	dirty bool // recs differ from the file (a write failed)
	// logged remembers records counted and logged that the full registry
	// could not list, so they are logged once too.
	logged map[int64]bool
}

type isolatedFile struct {
	Version int              `json:"version"`
	Records []IsolatedRecord `json:"records"`
}

// maxIsolatedFileBytes bounds the registry file a store reads (a full
// registry is about 3 MB).
const maxIsolatedFileBytes = 16 << 20

// loadIsolated reads the registry (missing: empty). An unreadable one is
// renamed to isolated.json.unreadable, kept for inspection, and the store
// starts with an empty registry: the registry is a record for operators,
// not something the data depends on.
func (s *Store) loadIsolated() error {
	path := s.path(isolatedName)
	b, err := readSmallFile(s.cfg.FS, path, maxIsolatedFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var f isolatedFile
	if err == nil {
		err = json.Unmarshal(b, &f)
	}
	if err != nil {
		s.logger.Error("store: the registry of isolated records is unreadable; kept aside, starting a new one", "path", path+".unreadable", "err", err)
		if err := s.cfg.FS.Rename(path, path+".unreadable"); err != nil {
			return fmt.Errorf("store: set aside %s: %w", path, err)
		}
		return s.cfg.FS.SyncDir(s.cfg.Dir)
	}
	s.iso.recs = f.Records
	return nil
}

// ReadIsolated reads the registry of isolated records of the store in
// cfg.Dir without opening the store (keel check). A missing registry is
// empty.
func ReadIsolated(cfg Config) ([]IsolatedRecord, error) {
	cfg.setDefaults()
	path := filepath.Join(cfg.Dir, isolatedName)
	b, err := readSmallFile(cfg.FS, path, maxIsolatedFileBytes)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("store: read %s: %w", path, err)
	}
	var f isolatedFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("store: %s is not a registry of isolated records: %w", path, err)
	}
	return f.Records, nil
}

// Isolated returns the isolated records, oldest first.
func (s *Store) Isolated() []IsolatedRecord {
	s.iso.mu.Lock()
	defer s.iso.mu.Unlock()
	return slices.Clone(s.iso.recs)
}

// isolate registers a record withheld from consumers. It reports whether
// the record is new (then it was logged and counted).
func (s *Store) isolate(r IsolatedRecord) bool {
	r.FoundAt = s.cfg.Now().UTC()
	s.iso.mu.Lock()
	defer s.iso.mu.Unlock()
	if i := s.iso.find(r); i >= 0 {
		if old := s.iso.recs[i]; !old.queueKnown() && r.queueKnown() {
			r.FoundAt, r.FoundBy = old.FoundAt, old.FoundBy
			s.iso.recs[i] = r // the scrubber's entry learns its queue
			s.persistIsolatedLocked()
		}
		return false
	}
	if s.iso.logged[r.PhysOffset] {
		return false
	}
	s.stats.isolated.Add(1)
	s.logger.Error("store: isolated a corrupt record: it is never delivered; consumers continue after it",
		"topic", r.Topic, "queue_id", r.QueueID, "offset", r.QueueOffset, "commitlog_offset", r.PhysOffset,
		"size", r.Size, "found_by", r.FoundBy, "reason", r.Reason, "registry", s.path(isolatedName))
	if !s.iso.makeRoom(s.log.MinOffset()) {
		if s.iso.logged == nil {
			s.iso.logged = map[int64]bool{}
		}
		if len(s.iso.logged) < maxIsolatedRecords { // bounded too: past it, logged every time
			s.iso.logged[r.PhysOffset] = true
		}
		s.logger.Error("store: the registry of isolated records is full; this one is not listed",
			"limit", maxIsolatedRecords, "commitlog_offset", r.PhysOffset)
		return true
	}
	s.iso.recs = append(s.iso.recs, r)
	s.persistIsolatedLocked()
	return true
}

// find returns the index of the registered record r repeats, or -1: the
// same CommitLog offset, of the same queue entry or of an unknown queue.
func (iso *isolation) find(r IsolatedRecord) int {
	return slices.IndexFunc(iso.recs, func(o IsolatedRecord) bool {
		if o.PhysOffset != r.PhysOffset {
			return false
		}
		return !o.queueKnown() || !r.queueKnown() || (o.Topic == r.Topic && o.QueueID == r.QueueID && o.QueueOffset == r.QueueOffset)
	})
}

// makeRoom drops entries below minPhys while the registry is full and
// reports whether there is room for one more.
func (iso *isolation) makeRoom(minPhys int64) bool {
	if len(iso.recs) < maxIsolatedRecords {
		return true
	}
	kept := slices.DeleteFunc(iso.recs, func(o IsolatedRecord) bool { return o.PhysOffset < minPhys })
	if len(kept) < len(iso.recs) {
		iso.dirty = true
	}
	iso.recs = kept
	return len(iso.recs) < maxIsolatedRecords
}

// persistIsolatedLocked writes the registry; iso.mu is held. A failure is
// logged and retried later (retryIsolated).
func (s *Store) persistIsolatedLocked() {
	b, err := json.MarshalIndent(isolatedFile{Version: 1, Records: s.iso.recs}, "", " ")
	if err == nil {
		err = vfs.WriteFileDurable(s.cfg.FS, s.path(isolatedName), b, 0o600)
	}
	if err != nil {
		if !s.iso.dirty {
			s.logger.Error("store: cannot write the registry of isolated records; retrying later (the records are skipped anyway)", "err", err)
		}
		s.iso.dirty = true
		select { // the scrubber's goroutine retries it
		case s.scrubWake <- struct{}{}:
		default:
		}
		return
	}
	s.iso.dirty = false
}

// retryIsolated rewrites the registry if an earlier write failed.
func (s *Store) retryIsolated() {
	s.iso.mu.Lock()
	defer s.iso.mu.Unlock()
	if s.iso.dirty {
		s.persistIsolatedLocked()
	}
}

// readSmallFile reads a whole metadata file through the store's FS.
func readSmallFile(fs vfs.FS, path string, maxBytes int64) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size > maxBytes {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", path, size, maxBytes)
	}
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil && size > 0 {
		return nil, err
	}
	return b, nil
}

// recheck handles a queue entry whose record failed verification (err):
// it reads the entry again around the page cache. If that copy verifies
// and belongs to the entry, the fault was in the read: the copy is
// returned (in r's buffers). Otherwise the record is isolated and recheck
// returns nil, nil: the caller skips the entry.
func (s *Store) recheck(st *queueRead, e consumequeue.Entry, qo int64, r *GetResult, err error) ([]byte, error) {
	rec, rerr := s.log.RereadEntry(e.PhysOffset, e.Size)
	if rerr == nil {
		rerr = recordBelongs(rec, e.PhysOffset, st.topic, st.queueID, qo)
	}
	if rerr == nil {
		s.stats.readFaults.Add(1)
		s.logger.Warn("store: a read returned bytes failing verification, but the record on disk verifies: the fault was in the read (filesystem or device), not in the data; serving the verified copy",
			"topic", st.topic, "queue_id", st.queueID, "offset", qo, "commitlog_offset", e.PhysOffset, "first_read_err", err)
		out := r.alloc(len(rec))
		copy(out, rec)
		st.run = nil // the rest of the run came from the same bad read: read it again
		return out, nil
	}
	if !corruptErr(rerr) {
		return nil, rerr // an I/O error on the re-read: report it, isolate nothing
	}
	// Replication (not yet built) hooks in here: fetch the entry from an
	// in-sync replica, verify it, serve it and repair the local copy,
	// isolating only when no replica has it intact.
	s.stats.corruptReads.Add(1)
	s.isolate(IsolatedRecord{Topic: st.topic, QueueID: st.queueID, QueueOffset: qo, PhysOffset: e.PhysOffset,
		Size: e.Size, FoundBy: FoundByRead, Reason: rerr.Error()})
	return nil, nil
}

// rereadRecord reads the record at phys again around the page cache after
// a lookup by offset failed verification (err): a copy that verifies is
// returned (a read fault, logged and counted); otherwise the second error.
// A lookup by offset blocks no queue, so nothing is isolated here.
func (s *Store) rereadRecord(phys int64, err error) ([]byte, error) {
	rec, rerr := s.log.RereadRecord(phys)
	if rerr != nil {
		return nil, rerr
	}
	s.stats.readFaults.Add(1)
	s.logger.Warn("store: a read returned bytes failing verification, but the record on disk verifies: the fault was in the read (filesystem or device), not in the data; serving the verified copy",
		"commitlog_offset", phys, "first_read_err", err)
	return rec, nil
}

// corruptErr reports whether err says data failed verification (as opposed
// to an I/O error or an offset holding no record).
func corruptErr(err error) bool {
	return !commitlog.IsNoRecord(err) && (errors.Is(err, ErrCorrupt) || errors.Is(err, commitlog.ErrCorrupt))
}

// nextToDispatch reads the next record for the dispatcher (dispatchMu is
// held). An entry failing verification is read once more around the page
// cache: if that copy verifies, the fault was in the read; it is logged and
// counted, and dispatch goes on. If it fails again the error is returned
// and the store goes read-only, as before: the dispatcher reads the newest
// records, written and verified moments ago, so damage there means the
// write path or the device is failing; and past an entry whose length may
// be damaged the next record's start is unknown, so nothing after it could
// be dispatched. Recovery at the next start decides (and keeps the bytes).
func (s *Store) nextToDispatch(limit int64) ([]byte, int64, error) {
	rec, phys, err := s.reader.Next(limit)
	if err == nil || !corruptErr(err) {
		return rec, phys, err
	}
	at := s.reader.Offset()
	s.reader.Reread()
	rec, phys, rerr := s.reader.Next(limit)
	if rerr != nil {
		s.logger.Error("store: a record to dispatch fails verification when read again, bypassing the page cache: the data on disk (or every read of it) is damaged; the store goes read-only; keel check on the stopped store tells whether the bytes on disk verify",
			"commitlog_offset", at, "err", rerr)
		return nil, 0, rerr
	}
	s.stats.readFaults.Add(1)
	s.logger.Warn("store: a read returned bytes failing verification, but the record on disk verifies: the fault was in the read (filesystem or device), not in the data; dispatching the verified copy",
		"commitlog_offset", phys, "first_read_err", err)
	return rec, phys, nil
}

// IntegrityStats counts what reads and the scrubber found since the store
// opened.
type IntegrityStats struct {
	// ReadFaults: reads that returned bytes failing verification whose
	// re-read verified (served; the fault was the read's).
	ReadFaults int64
	// Isolated: corrupt records newly isolated (Listed counts the
	// registry, including records isolated before this open).
	Isolated int64
	Listed   int
	Scrub    ScrubStatus
	// RecoveryRepaired: corrupt CommitLog ranges in durable data that
	// recovery at this open replaced by hole records (RepairCorruption).
	RecoveryRepaired int
	// UnsyncedTailBytes: bytes recovery at this open cut after a crash as
	// an unsynced tail written back out of order (kept in quarantine).
	UnsyncedTailBytes int64
}

// IntegrityStats returns the counters of isolation and scrubbing.
func (s *Store) IntegrityStats() IntegrityStats {
	s.iso.mu.Lock()
	listed := len(s.iso.recs)
	s.iso.mu.Unlock()
	return IntegrityStats{ReadFaults: s.stats.readFaults.Load(), Isolated: s.stats.isolated.Load(), Listed: listed, Scrub: s.ScrubStatus(),
		RecoveryRepaired: len(s.recovered.Repaired), UnsyncedTailBytes: s.recovered.UnsyncedBytes}
}
