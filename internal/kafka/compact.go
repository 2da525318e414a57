package kafka

// Compacted topics (cleanup.policy=compact, or compact,delete) on the
// shared CommitLog. The CommitLog holds every topic's records and is
// never rewritten, so a compacted partition gets a copy of its own
// (compactfile.go): a cleaner pass writes the partition's surviving
// records below a cleaned point C into a new generation of the copy, at
// their original offsets; Fetch below C reads the copy, at and above C
// the store. One pass of a partition:
//
//	1. dirty = the store's records from C (the log start at the first
//	   pass) up to the first one not yet durable (Flushed), not older
//	   than min.compaction.lag.ms, at most compactMaxDirtyBytes
//	2. keys = the last offset of every key in the copy's batches (past
//	   retention and DeleteRecords for compact,delete) and in dirty
//	3. the new copy: each batch of the old copy and of dirty with the
//	   records that are their key's last (a tombstone only until its
//	   horizon: the first pass that saw it plus delete.retention.ms),
//	   rewritten when it lost some (compactclean.go); cleaned point =
//	   the end of dirty
//	4. written under a temporary name, fdatasynced, renamed, the
//	   directory synced; then readers switch to it and the old
//	   generation is removed
//
// A crash before the directory sync of step 4 leaves the old generation
// (or none) and the store's records from the old C, all still held; after
// it, the new one. The store keeps every CommitLog segment from the one
// entry C points into (an age hold, store.SetAgeHolds): the records not
// yet cleaned are never taken by age retention. Disk pressure ignores
// holds (docs/kafka.md, "Compaction").
//
// A pass runs when the partition's dirty bytes are at least
// min.cleanable.dirty.ratio of its copy and dirty bytes together, when
// its oldest dirty record is older than max.compaction.lag.ms, or when a
// tombstone's horizon has passed; passes run every
// Config.CompactionInterval, one partition at a time.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/translate"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// compactDir is the directory of the compacted copies, under the data
// directory.
const compactDir = "kafka-compacted"

// compactMaxDirtyBytes bounds the store bytes one pass of a partition
// reads (and holds in memory); a larger backlog is cleaned in several
// passes.
var compactMaxDirtyBytes int64 = 64 << 20 // a variable for tests

// compactLimit bounds what a compressed batch may inflate to while it is
// cleaned.
const compactLimit = translate.DefaultLimit

// compactor cleans the compacted topics of one store and serves the
// copies' reads.
type compactor struct {
	fs   vfs.FS
	dir  string
	st   *store.Store
	core *core.Broker
	log  *slog.Logger
	// skewMs is added to the clock the cleaner reads (tests move time on).
	skewMs atomic.Int64

	rounds atomic.Uint64 // cleaning rounds done (tests wait on it)
	passes atomic.Uint64 // partition passes that wrote a copy

	passMu sync.Mutex // one pass at a time; a topic is dropped between passes
	closed atomic.Bool
	unsub  func() // stops the core's topic announcements (close)

	mu    sync.Mutex
	parts map[queueKey]*compactPart
	gone  map[string]bool // topics deleted since the last round (guarded by mu)
}

// compactPart is one partition's copy.
type compactPart struct {
	mu  sync.RWMutex // readers share it; a pass swapping the copy takes it
	cp  *compactCopy // nil: never cleaned
	err error        // the copy failed verification: the partition is not served
	gen uint64       // the last generation written or found
}

// newCompactor opens the copies under dir.
func newCompactor(fs vfs.FS, dir string, st *store.Store, c *core.Broker, log *slog.Logger) (*compactor, error) {
	x := &compactor{fs: fs, dir: dir, st: st, core: c, log: log, parts: map[queueKey]*compactPart{}, gone: map[string]bool{}}
	if err := vfs.MkdirAllDurable(fs, dir, 0o755); err != nil {
		return nil, fmt.Errorf("kafka: compacted copies' directory: %w", err)
	}
	latest, stale, err := findCopies(fs, dir)
	if err != nil {
		return nil, err
	}
	for _, n := range stale {
		if err := fs.Remove(path.Join(dir, n)); err != nil {
			return nil, fmt.Errorf("kafka: remove %s: %w", n, err)
		}
	}
	for k, gen := range latest {
		p := &compactPart{gen: gen}
		if p.cp, p.err = openCopy(fs, dir, k, gen); p.err == nil {
			if p.err = x.checkAnchor(k, p.cp); p.err != nil {
				p.cp.f.Close()
				p.cp = nil
			}
		}
		if p.err != nil {
			log.Error("kafka: compacted copy not readable; the partition is not served until it is repaired", "topic", k.topic, "partition", k.queueID, "err", p.err)
		}
		x.parts[k] = p
	}
	x.unsub = c.OnTopicsChanged(x.topicsChanged)
	return x, nil
}

// entryPhys is the CommitLog offset of the record at entry off of k.
func (x *compactor) entryPhys(k queueKey, off int64) (int64, bool) {
	var e [1]store.QueueEntry
	if n, err := x.st.QueueEntries(k.topic, k.queueID, off, e[:]); err != nil || n != 1 {
		return 0, false
	}
	return e[0].PhysOffset, true
}

// checkAnchor says why c is not partition k's copy: the entry at its
// anchor, while the store has it, locates another record (the topic was
// deleted and made again under its name unseen).
func (x *compactor) checkAnchor(k queueKey, c *compactCopy) error {
	if c.anchor < 0 || c.anchor < x.st.MinOffset(k.topic, k.queueID) || c.anchor >= x.st.MaxOffset(k.topic, k.queueID) {
		return nil // the entry is gone (or not there yet): nothing to tell by
	}
	if phys, ok := x.entryPhys(k, c.anchor); ok && phys != c.anchorPhys {
		return fmt.Errorf("%w: entry %d locates CommitLog offset %d, the copy began at %d: another topic of the same name", errCopyCorrupt, c.anchor, phys, c.anchorPhys)
	}
	return nil
}

// errTopicGone: the topic of a copy was deleted (the copy goes at the
// next round).
var errTopicGone = errors.New("kafka: the topic of this compacted copy was deleted")

// topicsChanged is the core's hook after a topic was created, changed or
// deleted (through any door, or replicated to a slave): a copy whose
// topic is gone is not served from now on, and the next round removes
// it, even if a topic of the same name is made again meanwhile (its
// offsets start anew; the copy is not its).
func (x *compactor) topicsChanged() {
	if x.closed.Load() {
		return
	}
	exists := map[string]bool{}
	for _, tc := range x.core.Topics() {
		exists[tc.TopicName] = true
	}
	var stale []*compactPart
	x.mu.Lock()
	for k, p := range x.parts {
		if !exists[k.topic] {
			x.gone[k.topic] = true
			stale = append(stale, p)
		}
	}
	x.mu.Unlock()
	for _, p := range stale {
		p.mu.Lock()
		if p.err == nil {
			p.err = errTopicGone
		}
		p.mu.Unlock()
	}
}

// part is partition k's state (created on first use).
func (x *compactor) part(k queueKey) *compactPart {
	x.mu.Lock()
	defer x.mu.Unlock()
	p := x.parts[k]
	if p == nil {
		p = &compactPart{}
		x.parts[k] = p
	}
	return p
}

// lookup is partition k's state, nil if it has none.
func (x *compactor) lookup(k queueKey) *compactPart {
	if x == nil {
		return nil
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.parts[k]
}

// close closes every copy.
func (x *compactor) close() {
	if x == nil {
		return
	}
	x.closed.Store(true)
	x.unsub()
	x.passMu.Lock()
	defer x.passMu.Unlock()
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, p := range x.parts {
		p.mu.Lock()
		if p.cp != nil {
			p.cp.f.Close()
			p.cp = nil
		}
		p.mu.Unlock()
	}
}

// compactSettings are a topic's compaction configs.
type compactSettings struct {
	compact, del      bool
	deleteRetentionMs int64
	minLagMs          int64
	maxLagMs          int64
	dirtyRatio        float64
	retentionMs       int64 // -1: none (compact only, or not set)
	retentionBytes    int64 // -1: none
}

// cleanupPolicy is a topic's cleanup.policy: whether it compacts, and
// whether it deletes by retention.
func cleanupPolicy(tc core.TopicConfig) (compact, del bool) {
	v, ok := tc.Attributes[configAttr("cleanup.policy")]
	if !ok {
		return false, true
	}
	for _, p := range strings.Split(v, ",") {
		switch strings.ToLower(strings.TrimSpace(p)) {
		case "compact":
			compact = true
		case "delete":
			del = true
		}
	}
	return compact, del
}

// isCompacted reports whether tc's cleanup.policy compacts.
func isCompacted(tc core.TopicConfig) bool {
	c, _ := cleanupPolicy(tc)
	return c
}

func settingsOf(tc core.TopicConfig) compactSettings {
	long := func(name string, def int64) int64 {
		if v, ok := tc.Attributes[configAttr(name)]; ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
		return def
	}
	s := compactSettings{deleteRetentionMs: long("delete.retention.ms", 86400000), minLagMs: long("min.compaction.lag.ms", 0),
		maxLagMs: long("max.compaction.lag.ms", math.MaxInt64), dirtyRatio: 0.5, retentionMs: -1, retentionBytes: -1}
	s.compact, s.del = cleanupPolicy(tc)
	if v, ok := tc.Attributes[configAttr("min.cleanable.dirty.ratio")]; ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			s.dirtyRatio = f
		}
	}
	if s.del {
		s.retentionMs, s.retentionBytes = long("retention.ms", -1), long("retention.bytes", -1)
	}
	return s
}

// round is one cleaning round over every compacted topic; it also
// removes the copies of topics that no longer exist.
func (x *compactor) round(stop func() bool) {
	x.mu.Lock()
	deleted := x.gone
	x.gone = map[string]bool{}
	x.mu.Unlock()
	for t := range deleted {
		x.dropTopic(t)
	}
	topics := x.core.Topics()
	exists := make(map[string]bool, len(topics))
	for _, tc := range topics {
		exists[tc.TopicName] = true
		if !isCompacted(tc) {
			continue
		}
		for q := range tc.QueueNums() {
			if stop() {
				return
			}
			if err := x.clean(tc.TopicName, q); err != nil {
				x.log.Error("kafka: compaction: partition not cleaned; retried next round", "topic", tc.TopicName, "partition", q, "err", err)
			}
		}
	}
	x.mu.Lock()
	var gone []string
	for k := range x.parts {
		if !exists[k.topic] {
			gone = append(gone, k.topic)
		}
	}
	x.mu.Unlock()
	for _, t := range gone {
		x.dropTopic(t)
	}
	x.rounds.Add(1)
}

// dropTopic removes every copy of topic (a deleted or created topic).
func (x *compactor) dropTopic(topic string) {
	if x == nil {
		return
	}
	x.passMu.Lock()
	defer x.passMu.Unlock()
	x.mu.Lock()
	var drop []*compactPart
	for k, p := range x.parts {
		if k.topic == topic {
			drop = append(drop, p)
			delete(x.parts, k)
		}
	}
	x.mu.Unlock()
	for _, p := range drop {
		p.mu.Lock()
		if p.cp != nil {
			p.cp.f.Close()
			if err := x.fs.Remove(p.cp.path); err != nil {
				x.log.Error("kafka: compaction: copy of a deleted topic not removed", "topic", topic, "err", err)
			}
			p.cp = nil
		}
		p.mu.Unlock()
	}
	if len(drop) > 0 {
		if err := x.fs.SyncDir(x.dir); err != nil {
			x.log.Error("kafka: compaction: directory sync", "err", err)
		}
	}
}

// dirtyBatch is one batch read from the store for a pass.
type dirtyBatch struct {
	b   []byte // the whole batch (baseOffset its first entry)
	end int64  // the entry after it
}

// clean runs one pass over partition (topic, q) if it is due.
func (x *compactor) clean(topic string, q int32) error {
	x.passMu.Lock()
	defer x.passMu.Unlock()
	tc, ok := x.core.Topic(topic)
	if !ok {
		return nil
	}
	k := queueKey{topic, q}
	p := x.part(k)
	p.mu.RLock()
	old, broken := p.cp, p.err
	p.mu.RUnlock()
	if broken != nil {
		return nil // logged at open
	}
	set := settingsOf(tc)
	now := time.Now().UnixMilli() + x.skewMs.Load()
	logStart := deletedBelow(tc, q)
	storeStart, hwm := x.st.MinOffset(topic, q), x.st.MaxOffset(topic, q)
	from, cleaned := max(storeStart, logStart), max(storeStart, logStart)
	var wrong error
	if old != nil && old.cleaned > hwm {
		wrong = fmt.Errorf("the copy covers offsets up to %d, the partition holds %d", old.cleaned, hwm)
	} else if old != nil {
		wrong = x.checkAnchor(k, old)
	}
	if wrong != nil {
		// The topic was made again under its name without this door
		// knowing (deleted and created while it was down). Its records are
		// not this copy's: the partition is not served.
		p.mu.Lock()
		p.err = wrong
		p.mu.Unlock()
		x.log.Error("kafka: compaction: a compacted copy not of its partition; the partition is not served", "topic", topic, "partition", q, "err", wrong)
		return nil
	}
	if old != nil {
		from, cleaned = max(old.from, logStart), old.cleaned
		if storeStart > cleaned {
			x.log.Error("kafka: compaction: records of a compacted partition were removed before they were cleaned (disk pressure)", "topic", topic, "partition", q, "cleaned", cleaned, "store_start", storeStart)
		}
	}
	dirtyStart := max(cleaned, storeStart, logStart)
	dirty, dirtyEnd, dirtyBytes, oldestMs, err := x.readDirty(k, dirtyStart, hwm, now-set.minLagMs)
	if err != nil {
		return err
	}
	kept, from := retainFrames(old, from, logStart, set, now, dirtyBytes)
	if !x.due(old, kept, dirtyEnd > dirtyStart, dirtyBytes, oldestMs, set, now) {
		return nil
	}
	cleaned = max(cleaned, dirtyEnd)
	anchor, anchorPhys := int64(-1), int64(-1) // the copy's first record, where it began
	if old != nil {
		anchor, anchorPhys = old.anchor, old.anchorPhys
	} else if phys, ok := x.entryPhys(k, dirtyStart); ok {
		anchor, anchorPhys = dirtyStart, phys
	}
	next, err := x.writeCopy(k, p.gen+1, old, kept, dirty, from, cleaned, [2]int64{anchor, anchorPhys}, set, now)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.cp, p.gen = next, next.gen
	p.mu.Unlock()
	x.passes.Add(1)
	if old != nil {
		old.f.Close()
		if err := x.fs.Remove(old.path); err != nil {
			x.log.Warn("kafka: compaction: old copy not removed (removed at the next start)", "path", old.path, "err", err)
		} else if err := x.fs.SyncDir(x.dir); err != nil {
			x.log.Warn("kafka: compaction: directory sync", "err", err)
		}
	}
	return nil
}

// due says whether a pass is worth it: new records to clean (dirty
// ratio, or max.compaction.lag.ms passed), a tombstone horizon passed, or
// frames retention drops.
func (x *compactor) due(old *compactCopy, kept []int, hasDirty bool, dirtyBytes, oldestMs int64, set compactSettings, now int64) bool {
	if old == nil {
		return hasDirty
	}
	if len(kept) < len(old.frames) {
		return true
	}
	for _, i := range kept {
		if h := old.frames[i].horizon; h >= 0 && h <= now {
			return true
		}
	}
	if !hasDirty {
		return false
	}
	if float64(dirtyBytes) >= set.dirtyRatio*float64(dirtyBytes+old.bytes) {
		return true
	}
	return set.maxLagMs < math.MaxInt64 && oldestMs < now-set.maxLagMs
}

// retainFrames is which frames of old stay (indices, in order) past the
// log start and, for compact,delete, retention.ms and retention.bytes
// (the oldest go first, as Kafka drops its oldest segments), and the log
// start the copy keeps.
func retainFrames(old *compactCopy, from, logStart int64, set compactSettings, now, dirtyBytes int64) ([]int, int64) {
	if old == nil {
		return nil, from
	}
	total := old.bytes + dirtyBytes
	var kept []int
	dropping := true
	for i, fr := range old.frames {
		if dropping {
			size := int64(frameHeaderSize) + int64(fr.size)
			switch {
			case fr.last < logStart,
				set.retentionMs >= 0 && fr.maxTs < now-set.retentionMs,
				set.retentionBytes >= 0 && total-size >= set.retentionBytes:
				total -= size
				from = max(from, fr.last+1)
				continue
			}
			dropping = false
		}
		kept = append(kept, i)
	}
	return kept, from
}

// readDirty reads the store's records of k from entry off (< hwm) for a
// pass: up to the first not durable, the first younger than lagCutoff
// (ms) and compactMaxDirtyBytes. It returns them as batches (another
// protocol's message converted, one record each; one without a key is
// dropped), the entry after the last, their bytes and the oldest's time.
func (x *compactor) readDirty(k queueKey, off, hwm, lagCutoff int64) ([]dirtyBatch, int64, int64, int64, error) {
	bound, err := x.durableBound(k, off, hwm)
	if err != nil || bound <= off {
		return nil, off, 0, 0, err
	}
	var out []dirtyBatch
	oldest := int64(math.MaxInt64)
	idx, taken := off, int64(0)
	for idx < bound {
		r, err := x.st.GetMessage(k.topic, k.queueID, idx, 64, 4<<20, nil)
		if err != nil {
			return nil, off, 0, 0, err
		}
		if r.Status == store.OffsetTooSmall && r.NextOffset > idx {
			idx = r.NextOffset
			r.Release()
			continue
		}
		if r.Status != store.Found {
			r.Release()
			break
		}
		stop := false
		for _, rec := range r.Records {
			b, ts, end, err := dirtyOf(rec, k, idx)
			if err != nil {
				r.Release()
				return nil, off, 0, 0, err
			}
			if end <= idx {
				continue // another entry of a batch already taken
			}
			if end > bound || ts > lagCutoff {
				stop = true
				break
			}
			if b != nil {
				out = append(out, dirtyBatch{b: b, end: end})
				taken += int64(len(b))
			}
			oldest, idx = min(oldest, ts), end
		}
		next := r.NextOffset
		n := len(r.Records)
		r.Release()
		if stop || n == 0 && next <= idx {
			break
		}
		idx = max(idx, next)
	}
	return out, idx, taken, oldest, nil
}

// dirtyOf is a stored record of k at or after entry idx as a batch to
// clean (a copy), with its time (the batch's max timestamp, else its
// store time) and the entry after it; a message of another protocol is
// converted into one record (nil batch when it has no key: dropped).
func dirtyOf(rec []byte, k queueKey, idx int64) ([]byte, int64, int64, error) {
	b, err := kafkaView(rec, k)
	switch {
	case err != nil:
		return nil, 0, 0, err
	case b.old:
		return nil, 0, 0, errOldFormat
	case b.ok:
		if b.end <= idx {
			return nil, 0, b.end, nil
		}
		body := append([]byte(nil), rec[len(rec)-b.bodyLen:]...)
		ts := b.storeMs
		if maxTs := int64(binary.BigEndian.Uint64(body[35:])); maxTs >= 0 {
			ts = maxTs
		}
		return body, ts, b.end, nil
	}
	qo, ok := translate.QueueOffset(rec, k.topic, k.queueID)
	if !ok || qo < idx {
		return nil, 0, idx, nil
	}
	kr, err := translate.KafkaRecordOf(rec, qo, compactLimit)
	if err != nil {
		return nil, 0, 0, err
	}
	if kr.Key == nil {
		return nil, kr.Timestamp, qo + 1, nil
	}
	return translate.AppendKafkaBatch(nil, []translate.KafkaRecord{kr}), kr.Timestamp, qo + 1, nil
}

// durableBound is the first entry from off (< hwm) whose record is not
// yet durable (Flushed: a power loss could take it and its offsets be
// given again), or the one that would pass compactMaxDirtyBytes.
func (x *compactor) durableBound(k queueKey, off, hwm int64) (int64, error) {
	flushed := x.st.Offset(store.Flushed)
	var buf [256]store.QueueEntry
	idx, bytes, last := off, int64(0), int64(-1)
	for idx < hwm {
		n, err := x.st.QueueEntries(k.topic, k.queueID, idx, buf[:min(int64(len(buf)), hwm-idx)])
		if err != nil {
			return off, err
		}
		if n == 0 {
			break
		}
		for i, e := range buf[:n] {
			if e.PhysOffset == last {
				continue
			}
			if e.PhysOffset+int64(e.Size) > flushed || bytes+int64(e.Size) > compactMaxDirtyBytes && bytes > 0 {
				return idx + int64(i), nil
			}
			last, bytes = e.PhysOffset, bytes+int64(e.Size)
		}
		idx += int64(n)
	}
	return idx, nil
}

// writeCopy writes generation gen of k's copy: the kept frames of old and
// the dirty batches, each with its key's last record only.
func (x *compactor) writeCopy(k queueKey, gen uint64, old *compactCopy, kept []int, dirty []dirtyBatch, from, cleaned int64, anchor [2]int64, set compactSettings, now int64) (*compactCopy, error) {
	// The old copy holds each key once, so a record of it is the latest
	// unless its key comes again in the dirty batches, and the map needs
	// only theirs: its size is bounded by a pass's dirty bytes, not by the
	// keys of the partition. Keys are held as SHA-256 sums (a collision
	// would drop a latest record; at 2^-128 per pair, never seen).
	last := map[[sha256.Size]byte]int64{} // a dirty key: its last offset
	for _, d := range dirty {
		if err := eachCleanRecord(d.b, compactLimit, func(r cleanRecord) {
			if r.key != nil {
				last[sha256.Sum256(r.key)] = r.offset
			}
		}); err != nil {
			return nil, err
		}
	}
	var buf []byte
	var err error
	w, err := newCopyWriter(x.fs, x.dir, k, gen)
	if err != nil {
		return nil, err
	}
	defer w.abort()
	keptLatest := func(r cleanRecord) bool {
		_, again := last[sha256.Sum256(r.key)]
		return r.key != nil && !again
	}
	latest := func(r cleanRecord) bool {
		o, ok := last[sha256.Sum256(r.key)]
		return r.key != nil && ok && o == r.offset
	}
	for _, i := range kept {
		fr := old.frames[i]
		if buf, err = old.batch(i, buf); err != nil {
			return nil, err
		}
		gone := fr.horizon >= 0 && fr.horizon <= now // its tombstones go
		out, err := filterBatch(buf, compactLimit, func(r cleanRecord) bool { return keptLatest(r) && !(r.tombstone && gone) })
		if err != nil {
			return nil, err
		}
		if out != nil {
			h := fr.horizon
			if gone {
				h = -1 // every tombstone it held is gone
			}
			if err := w.add(out, h); err != nil {
				return nil, err
			}
		}
	}
	for _, d := range dirty {
		out, err := filterBatch(d.b, compactLimit, latest)
		if err != nil || out == nil {
			if err != nil {
				return nil, err
			}
			continue
		}
		h := int64(-1)
		if has, err := batchHasTombstone(out, compactLimit); err != nil {
			return nil, err
		} else if has && set.deleteRetentionMs <= math.MaxInt64-now {
			h = now + set.deleteRetentionMs // else kept for good
		}
		if err := w.add(out, h); err != nil {
			return nil, err
		}
	}
	return w.finish(from, cleaned, anchor[0], anchor[1])
}

// copyFrom is the log start partition k's copy gives (ok false: none).
func (x *compactor) copyFrom(k queueKey) (int64, bool) {
	p := x.lookup(k)
	if p == nil {
		return 0, false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.cp == nil {
		return 0, false
	}
	return p.cp.from, true
}

// errCopyUnreadable: a partition whose copy failed verification.
var errCopyUnreadable = errors.New("kafka: the partition's compacted copy failed verification")

// read appends to rp the copy's batches from Kafka offset off (the one
// holding off first, which may start before it) while they fit in limit
// (at least one when rp is empty); it returns the offset to go on at in
// the store (off itself when the copy does not cover it) and whether the
// response is full.
func (x *compactor) read(k queueKey, off int64, limit int, rp *kmsg.FetchResponseTopicPartition) (int64, bool, error) {
	p := x.lookup(k)
	if p == nil {
		return off, false, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.err != nil {
		return off, false, fmt.Errorf("%w: %v", errCopyUnreadable, p.err)
	}
	c := p.cp
	if c == nil || off >= c.cleaned {
		return off, false, nil
	}
	i := sort.Search(len(c.frames), func(i int) bool { return c.frames[i].last >= off })
	var scratch []byte
	for ; i < len(c.frames); i++ {
		fr := c.frames[i]
		if len(rp.RecordBatches) > 0 && len(rp.RecordBatches)+int(fr.size) > limit {
			return fr.base, true, nil
		}
		var err error
		if scratch, err = c.batch(i, scratch); err != nil {
			return off, false, err
		}
		rp.RecordBatches = append(rp.RecordBatches, scratch...)
	}
	return c.cleaned, len(rp.RecordBatches) >= limit, nil
}

// byTime is, for ListOffsets by time, the first record of k's copy at or
// after offset from whose timestamp is at least ts (found), and the
// copy's cleaned point (0 without a copy), where the search goes on in
// the store otherwise.
func (x *compactor) byTime(k queueKey, from, ts int64) (off, recTs, cleaned int64, found bool, err error) {
	p := x.lookup(k)
	if p == nil {
		return 0, 0, 0, false, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.err != nil {
		return 0, 0, 0, false, fmt.Errorf("%w: %v", errCopyUnreadable, p.err)
	}
	c := p.cp
	if c == nil {
		return 0, 0, 0, false, nil
	}
	var buf []byte
	for i, fr := range c.frames {
		if fr.last < from || fr.maxTs < ts {
			continue // no record of the batch is that late
		}
		if buf, err = c.batch(i, buf); err != nil {
			return 0, 0, 0, false, err
		}
		err = translate.EachKafkaRecord(buf, compactLimit, func(r *translate.KafkaRecord) error {
			if r.Offset >= from && r.Timestamp >= ts {
				off, recTs, found = r.Offset, r.Timestamp, true
				return errFound
			}
			return nil
		})
		if found {
			return off, recTs, c.cleaned, true, nil
		}
		if err != nil {
			return 0, 0, 0, false, err
		}
	}
	return 0, 0, c.cleaned, false, nil
}

// holdsInto adds to out the age holds of the compacted partitions: from
// the cleaned point (the first record not in the copy), or the log start
// while never cleaned.
func (x *compactor) holdsInto(out store.QueueHolds) store.QueueHolds {
	if x == nil {
		return out
	}
	for _, tc := range x.core.Topics() {
		if !isCompacted(tc) {
			continue
		}
		if out == nil {
			out = store.QueueHolds{}
		}
		byID := out[tc.TopicName]
		if byID == nil {
			byID = make(map[int32]int64, tc.QueueNums())
			out[tc.TopicName] = byID
		}
		for q := range tc.QueueNums() {
			hold := deletedBelow(tc, q) // the store holds from its own min offset when that is later
			if p := x.lookup(queueKey{tc.TopicName, q}); p != nil {
				p.mu.RLock()
				if p.cp != nil {
					hold = p.cp.cleaned
				}
				p.mu.RUnlock()
			}
			byID[q] = hold
		}
	}
	return out
}

// keylessRecord returns why the whole batch b may not go to a compacted
// topic ("" if it may): a record without a key, as Kafka refuses it.
func keylessRecord(b []byte, topic string, q int32, limit int) string {
	missing := false
	if err := eachCleanRecord(b, limit, func(r cleanRecord) { missing = missing || r.key == nil }); err != nil {
		return "records not readable to check their keys: " + err.Error()
	}
	if missing {
		return "Compacted topic cannot accept message without key in topic partition " + topic + "-" + strconv.Itoa(int(q)) + "."
	}
	return ""
}

// runCompaction cleans the compacted topics every CompactionInterval
// until the server closes.
func (s *Server) runCompaction() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.CompactionInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
			s.compact.round(func() bool { return s.ctx.Err() != nil })
		}
	}
}
