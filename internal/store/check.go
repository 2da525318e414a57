package store

import (
	"cmp"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/store/index"
	"github.com/keelmq/keel/internal/store/record"
)

// Problem is one thing Check found wrong.
type Problem struct {
	Kind   string // one of the Kind constants, for counting
	File   string
	Offset int64 // CommitLog offset, or logical offset for a ConsumeQueue
	Msg    string
}

// Kinds of problems and warnings, as `keel check` counts them.
const (
	KindCorruptEntry   = "corrupt CommitLog entry"
	KindTornTail       = "torn CommitLog tail"
	KindMissingData    = "durable CommitLog data missing"
	KindMisplaced      = "record at the wrong offset"
	KindNoQueueEntry   = "record without its queue entry"
	KindNotDispatched  = "record not dispatched yet"
	KindWrongEntry     = "queue entry pointing elsewhere"
	KindBadEntry       = "queue entry pointing at a bad record"
	KindEntryPastEnd   = "queue entry past the CommitLog end"
	KindTagsCode       = "queue entry with a wrong tag code"
	KindKeyNotIndexed  = "key missing from the index"
	KindKeyNotYet      = "key not indexed yet"
	KindUnreadableFile = "unreadable file or directory"
	KindNotClosed      = "store not closed cleanly"
	KindSharedEntry    = "records with one entry for all their messages (earlier release)"
	KindTruncating     = "replica truncation in progress"
)

func (p Problem) String() string { return fmt.Sprintf("%s: offset %d: %s", p.File, p.Offset, p.Msg) }

// Report is the result of Check. Problems are corruption or inconsistency;
// Warnings are states the next Open repairs by itself (a torn tail or
// missing entries after a crash).
type Report struct {
	Segments      int
	Records       int64
	RecordBytes   int64
	MinOffset     int64
	EndOffset     int64
	Queues        int
	QueueEntries  int64
	IndexedKeys   int64
	CleanShutdown bool
	Problems      []Problem
	Warnings      []Problem

	// Left by corruption repairs (see package commitlog, "Repair"): not
	// problems. Holes are the hole records in the CommitLog, LostEntries
	// the ConsumeQueue entries whose record a hole replaced (consumers skip
	// them), Quarantine the files holding the original bytes.
	Holes           []commitlog.Hole
	LostEntries     int64
	QuarantineFiles int
	QuarantineBytes int64

	// DeletedTopicRecords counts records of deleted topics (their queues
	// are gone; retention removes the records with their segments).
	DeletedTopicRecords int64

	// Truncating: the store is a replica that stopped while truncating its
	// CommitLog at TruncateOffset (the intent <Dir>/truncate; the next
	// Open finishes the cut). The log is taken to end there: the
	// PastTruncationBytes after it are not checked (check_truncate.go).
	Truncating          bool
	TruncateOffset      int64
	PastTruncationBytes int64
}

// OK reports whether no problem was found.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

func (r *Report) problem(kind, file string, off int64, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{kind, file, off, fmt.Sprintf(format, args...)})
}

func (r *Report) warn(kind, file string, off int64, format string, args ...any) {
	r.Warnings = append(r.Warnings, Problem{kind, file, off, fmt.Sprintf(format, args...)})
}

// KindCount is how many problems (or warnings) of one kind a Check found.
type KindCount struct {
	Kind  string
	Count int
}

// CountKinds counts ps by kind, most frequent first (ties by kind).
func CountKinds(ps []Problem) []KindCount {
	byKind := map[string]int{}
	for _, p := range ps {
		byKind[p.Kind]++
	}
	out := make([]KindCount, 0, len(byKind))
	for k, n := range byKind {
		out = append(out, KindCount{k, n})
	}
	slices.SortFunc(out, func(a, b KindCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}

// maxCheckProblems bounds the problems one Check lists per kind.
const maxCheckProblems = 1000

// Check verifies a store that is not running, without changing it: every
// CommitLog record (CRC, structure, its offset field), every ConsumeQueue
// entry against the record it points at and every record against its
// entry, and that each indexed key of a record is found in the index. It
// returns an error only if the check itself could not run (for example the
// store is in use).
func Check(cfg Config) (Report, error) {
	cfg.setDefaults()
	var rep Report
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	if _, err := cfg.FS.Stat(filepath.Join(cfg.Dir, commitLogDir)); err != nil {
		return rep, fmt.Errorf("store: check %s: not a store directory: %w", cfg.Dir, err)
	}
	lock, err := cfg.FS.Lock(filepath.Join(cfg.Dir, lockName))
	if err != nil {
		return rep, fmt.Errorf("store: check: %w", err)
	}
	defer lock.Close()
	c := &checker{cfg: cfg, fs: newOverlayFS(cfg.FS), rep: &rep}
	c.cfg.FS = c.fs
	defer c.close()
	if err := c.run(); err != nil {
		return rep, err
	}
	return rep, nil
}

type checker struct {
	cfg    Config
	fs     *overlayFS
	rep    *Report
	log    *commitlog.Log
	cp     checkpoint
	haveCP bool
	queues map[string]map[int32]*consumequeue.Queue
	index  *index.Index
	// deleted maps a deleted topic to the offset below which its records
	// have no queue entries (tombstone.go).
	deleted map[string]int64
	// shared counts, per queue, the Kafka batch records that have one
	// entry for all their messages (no record.FlagEntryPerMessage: an
	// earlier release wrote them), and where the first is.
	shared map[queueKey]sharedEntries
}

type queueKey struct {
	topic string
	id    int32
}

type sharedEntries struct {
	n     int64
	first int64 // CommitLog offset
}

func (c *checker) close() {
	for _, byID := range c.queues {
		for _, q := range byID {
			q.Close()
		}
	}
	if c.index != nil {
		c.index.Close()
	}
	if c.log != nil {
		c.log.Close()
	}
}

func (c *checker) run() error {
	_, err := c.fs.Stat(filepath.Join(c.cfg.Dir, abortName))
	c.rep.CleanShutdown = err != nil
	if !c.rep.CleanShutdown {
		c.rep.warn(KindNotClosed, filepath.Join(c.cfg.Dir, abortName), 0, "the store was not closed cleanly (or is running)")
	}
	c.cp, err = readCheckpoint(c.fs, c.cfg.Dir)
	c.haveCP = err == nil
	if err != nil && !errors.Is(err, errNoCheckpoint) {
		c.rep.problem(KindUnreadableFile, filepath.Join(c.cfg.Dir, checkpointName), 0, "%v", err)
	}
	c.log, err = commitlog.Open(commitlog.Config{FS: c.fs, Dir: filepath.Join(c.cfg.Dir, commitLogDir), SegmentBytes: c.cfg.CommitLogSegmentBytes, CheckRecord: checkRecord})
	if err != nil {
		c.rep.problem(KindUnreadableFile, filepath.Join(c.cfg.Dir, commitLogDir), 0, "%v", err)
		return nil
	}
	c.countQuarantine()
	if c.deleted, err = readTombstones(c.fs, c.cfg.Dir); err != nil {
		c.rep.problem(KindUnreadableFile, filepath.Join(c.cfg.Dir, tombstoneName), 0, "%v", err)
	}
	c.readTruncateIntent() // check_truncate.go
	c.openQueues()
	c.openIndex()
	c.checkCommitLog()
	c.checkQueues()
	c.warnShared()
	return nil
}

// warnShared warns, once per queue, of Kafka batch records with one entry
// for all their messages (written before record.FlagEntryPerMessage): not
// a problem for the store, but their messages share a queue offset, and
// the Kafka door does not serve such a queue (docs/kafka.md, "Upgrading").
func (c *checker) warnShared() {
	keys := make([]queueKey, 0, len(c.shared))
	for k := range c.shared {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b queueKey) int { return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.id, b.id)) })
	for _, k := range keys {
		sh := c.shared[k]
		c.rep.warn(KindSharedEntry, c.segFile(sh.first), sh.first, "queue %s/%d holds %d %v records with one entry for all their messages (written by an earlier release; their messages share a queue offset): see docs/kafka.md, \"Upgrading\"", k.topic, k.id, sh.n, record.KafkaBatch)
	}
}

func (c *checker) openIndex() {
	dir := filepath.Join(c.cfg.Dir, indexDir)
	if _, err := c.fs.Stat(dir); err != nil && !(c.haveCP && c.cp.IndexFlushed > 0) {
		c.rep.warn(KindKeyNotYet, dir, 0, "no index directory yet (opening the store creates it)")
		return
	}
	ix, err := index.Open(index.Config{FS: c.fs, Dir: filepath.Join(c.cfg.Dir, indexDir), HashSlots: c.cfg.IndexHashSlots, MaxEntries: c.cfg.IndexMaxEntries})
	if err != nil {
		c.rep.problem(KindUnreadableFile, filepath.Join(c.cfg.Dir, indexDir), 0, "%v", err)
		return
	}
	c.index = ix
}

func (c *checker) openQueues() {
	c.queues = map[string]map[int32]*consumequeue.Queue{}
	root := filepath.Join(c.cfg.Dir, consumeQueueDir)
	topics, _ := c.fs.List(root)
	for _, topic := range topics {
		ids, _ := c.fs.List(filepath.Join(root, topic))
		for _, name := range ids {
			dir := filepath.Join(root, topic, name)
			id, err := strconv.ParseInt(name, 10, 32)
			if err != nil || id < 0 {
				c.rep.problem(KindUnreadableFile, dir, 0, "unexpected directory in the consume queues")
				continue
			}
			q, err := consumequeue.Open(consumequeue.Config{FS: c.fs, Dir: dir, Topic: topic, QueueID: int32(id), EntriesPerSegment: c.cfg.ConsumeQueueSegmentEntries})
			if err != nil {
				c.rep.problem(KindUnreadableFile, dir, 0, "%v", err)
				continue
			}
			if c.queues[topic] == nil {
				c.queues[topic] = map[int32]*consumequeue.Queue{}
			}
			c.queues[topic][int32(id)] = q
			c.rep.Queues++
		}
	}
}

// checkCommitLog verifies every record and that each has its ConsumeQueue
// entry and index keys.
func (c *checker) checkCommitLog() {
	c.rep.Segments = len(c.log.Segments())
	c.rep.MinOffset = c.log.MinOffset()
	visit := func(phys int64, rec []byte) {
		if c.pastTruncation(phys) {
			return
		}
		c.rep.Records++
		c.rep.RecordBytes += int64(len(rec))
		c.checkRecord(phys, rec)
	}
	var end int64
	var probs []commitlog.Problem
	var err error
	if c.rep.CleanShutdown {
		end, probs, err = c.log.Verify(visit)
	} else {
		// Judged as opening the store judges it (recovery.go).
		end, probs, err = c.log.VerifyAfterCrash(durableFrom(c.cp, c.haveCP), visit)
	}
	end, probs = c.capAtTruncation(end, probs)
	c.rep.EndOffset = end
	c.rep.Holes = c.log.Holes()
	if err != nil {
		c.rep.problem(KindUnreadableFile, filepath.Join(c.cfg.Dir, commitLogDir), end, "%v", err)
	}
	for _, p := range probs {
		if p.TornTail {
			c.rep.warn(KindTornTail, p.File, p.Offset, "%s", p.Msg)
		} else {
			c.rep.problem(KindCorruptEntry, p.File, p.Offset, "%s", p.Msg)
		}
	}
	switch m, err := commitlog.ReadMark(c.fs, filepath.Join(c.cfg.Dir, commitLogDir)); {
	case c.haveCP && end < c.cp.PhysFlushed:
		c.rep.problem(KindMissingData, filepath.Join(c.cfg.Dir, commitLogDir), end, "CommitLog ends before the checkpointed flushed offset %d: durable data is missing", c.cp.PhysFlushed)
	case err == nil && m.Found && end < m.Offset && !c.rep.Truncating:
		// A truncation in progress lowers the mark when the next start
		// finishes it.
		c.rep.problem(KindMissingData, filepath.Join(c.cfg.Dir, commitLogDir, commitlog.MarkName), end,
			"CommitLog ends before the flushed mark %d (fdatasynced before the store stopped): durable data is missing", m.Offset)
	}
}

func (c *checker) segFile(phys int64) string {
	return filepath.Join(c.cfg.Dir, commitLogDir, commitlog.SegmentName(c.log.SegmentStart(phys)))
}

func (c *checker) checkRecord(phys int64, rec []byte) {
	if len(c.rep.Problems) >= maxCheckProblems {
		return
	}
	if own := ownOffset(rec); own != phys {
		c.rep.problem(KindMisplaced, c.segFile(phys), phys, "record says it is at offset %d", own)
	}
	if recordType(rec) != record.RocketMQ {
		c.checkEnvelopeRecord(phys, rec)
		return
	}
	v := message.View(rec)
	topic := string(v.Topic())
	c.checkPlacement(phys, len(rec), topic, v.QueueID(), v.QueueOffset())
	c.checkKeys(phys, v, topic)
}

// checkEnvelopeRecord checks that an enveloped record has the ConsumeQueue
// entries of each of its destinations (all of them: one per logical
// message with record.FlagEntryPerMessage).
func (c *checker) checkEnvelopeRecord(phys int64, rec []byte) {
	if recordType(rec) == record.System {
		// No destinations; its body must be a system record this
		// release reads (an unknown kind would stop dispatch).
		if err := record.CheckSystem(record.Envelope(rec).Body()); err != nil {
			c.rep.problem(KindCorruptEntry, c.segFile(phys), phys, "%v", err)
		}
		return
	}
	e := record.Envelope(rec)
	n := e.Entries()
	e.EachDest(func(_ int, topic []byte, qid int32, qo, _ int64, _ int) error {
		for i := range n { // one entry per logical message with FlagEntryPerMessage
			c.checkPlacement(phys, len(rec), string(topic), qid, qo+i)
		}
		if e.Type() == record.KafkaBatch && e.Flags()&record.FlagEntryPerMessage == 0 {
			if c.shared == nil {
				c.shared = map[queueKey]sharedEntries{}
			}
			k := queueKey{string(topic), qid}
			sh := c.shared[k]
			if sh.n == 0 {
				sh.first = phys
			}
			sh.n++
			c.shared[k] = sh
		}
		return nil
	})
}

// checkPlacement checks that the record of size bytes at phys is the entry
// at queue offset qo of (topic, qid), or that it may be missing.
func (c *checker) checkPlacement(phys int64, size int, topic string, qid int32, qo int64) {
	if phys < c.deleted[topic] {
		c.rep.DeletedTopicRecords++ // its topic was deleted after it: no entries expected
		return
	}
	dispatched := c.haveCP && phys < c.cp.CQFlushed
	q := c.queues[topic][qid]
	var e [1]consumequeue.Entry
	n := 0
	if q != nil && qo >= q.MinOffset() && qo < q.MaxOffset() {
		n, _ = q.Get(qo, e[:])
	}
	switch {
	case n == 1 && (e[0].PhysOffset != phys || e[0].Size != int32(size)):
		c.rep.problem(KindWrongEntry, c.segFile(phys), phys, "consume queue %s/%d offset %d points at %d (size %d), not at this record", topic, qid, qo, e[0].PhysOffset, e[0].Size)
	case n == 0 && q != nil && qo < q.MinOffset():
		// retired by retention
	case n == 0 && dispatched:
		c.rep.problem(KindNoQueueEntry, c.segFile(phys), phys, "record %s/%d offset %d has no consume queue entry", topic, qid, qo)
	case n == 0:
		c.rep.warn(KindNotDispatched, c.segFile(phys), phys, "record %s/%d offset %d is not dispatched yet (opening the store adds it)", topic, qid, qo)
	}
}

func (c *checker) checkKeys(phys int64, v message.View, topic string) {
	if c.index == nil {
		return
	}
	indexed := c.haveCP && phys < c.cp.IndexFlushed
	keys := rocketMQKeys(v)
	for _, key := range keys {
		c.rep.IndexedKeys++
		ts := v.StoreTimestamp() // the index keeps whole seconds
		offs, err := c.index.Query(topic+"#"+key, 1<<16, ts-2000, ts+1000)
		if err != nil {
			c.rep.problem(KindUnreadableFile, filepath.Join(c.cfg.Dir, indexDir), phys, "query key %q: %v", key, err)
			return
		}
		found := false
		for _, o := range offs {
			found = found || o == phys
		}
		switch {
		case !found && indexed:
			c.rep.problem(KindKeyNotIndexed, filepath.Join(c.cfg.Dir, indexDir), phys, "key %q of the record at %d is not in the index", key, phys)
		case !found:
			c.rep.warn(KindKeyNotYet, filepath.Join(c.cfg.Dir, indexDir), phys, "key %q of the record at %d is not indexed yet (opening the store adds it)", key, phys)
		}
	}
}

// checkQueues verifies every ConsumeQueue entry against its record.
func (c *checker) checkQueues() {
	minPhys := c.log.MinOffset()
	for topic, byID := range c.queues {
		for qid, q := range byID {
			file := filepath.Join(c.cfg.Dir, consumeQueueDir, topic, strconv.Itoa(int(qid)))
			var ents [256]consumequeue.Entry
			for off := q.MinOffset(); off < q.MaxOffset() && len(c.rep.Problems) < maxCheckProblems; {
				n, err := q.Get(off, ents[:min(int64(len(ents)), q.MaxOffset()-off)])
				if err != nil || n == 0 {
					c.rep.problem(KindUnreadableFile, file, off, "read entries: %v", err)
					break
				}
				for i, e := range ents[:n] {
					c.rep.QueueEntries++
					c.checkEntry(file, topic, qid, off+int64(i), e, minPhys)
				}
				off += int64(n)
			}
		}
	}
}

func (c *checker) checkEntry(file, topic string, qid int32, qo int64, e consumequeue.Entry, minPhys int64) {
	if e.PhysOffset < minPhys {
		return // retired with its segment
	}
	if e.PhysOffset+int64(e.Size) > c.rep.EndOffset {
		if (!c.rep.CleanShutdown || c.rep.Truncating) && (!c.haveCP || c.cp.PhysFlushed <= c.rep.EndOffset) {
			// After a crash under ASYNC_FLUSH an entry may point at a record
			// that was never flushed; Open drops it.
			c.rep.warn(KindEntryPastEnd, file, qo, "entry points at %d, past the end of the CommitLog %d (opening the store drops it)", e.PhysOffset, c.rep.EndOffset)
			return
		}
		c.rep.problem(KindEntryPastEnd, file, qo, "entry points at %d (size %d), past the end of the CommitLog %d", e.PhysOffset, e.Size, c.rep.EndOffset)
		return
	}
	rec, err := c.log.ReadEntry(e.PhysOffset, e.Size, nil)
	if commitlog.IsHole(err) {
		c.rep.LostEntries++ // its record was lost to corruption; a repair left a hole
		return
	}
	if err != nil {
		c.rep.problem(KindBadEntry, file, qo, "entry points at %d (size %d): %v", e.PhysOffset, e.Size, err)
		return
	}
	if err := recordBelongs(rec, e.PhysOffset, topic, qid, qo); err != nil {
		c.rep.problem(KindWrongEntry, file, qo, "entry points at another record: %v", err)
		return
	}
	if recordType(rec) != record.RocketMQ {
		if want, _ := envelopeDest(rec, topic, qid, qo); e.TagsCode != want {
			c.rep.problem(KindTagsCode, file, qo, "tag code %d, the record's destination says %d", e.TagsCode, want)
		}
		return
	}
	if c.cfg.TagsCode != nil {
		return // a hook's code (the schedule topics' due times) is not rederived here
	}
	if want := message.View(rec).TagsCode(); e.TagsCode != want {
		c.rep.problem(KindTagsCode, file, qo, "tag code %d, the record's tags hash to %d", e.TagsCode, want)
	}
}

// countQuarantine counts the files of <Dir>/quarantine: bytes recovery or a
// repair removed from the CommitLog, kept for inspection.
func (c *checker) countQuarantine() {
	dir := filepath.Join(c.cfg.Dir, quarantineDir)
	names, _ := c.fs.List(dir)
	for _, name := range names {
		if fi, err := c.fs.Stat(filepath.Join(dir, name)); err == nil && !fi.IsDir() {
			c.rep.QuarantineFiles++
			c.rep.QuarantineBytes += fi.Size()
		}
	}
}
