package store

// The background scrubber. Open verifies only the tail of the CommitLog and
// reads verify only what a consumer asks for, so a bit flipped at rest in
// a cold segment would otherwise wait for the consumer that needs it. The
// scrubber re-verifies, in passes, at a bounded rate:
//
//   - every durable CommitLog record (size, magic, CRC, structure), from
//     the oldest segment to the dispatched and flushed offset, reading
//     cold ranges without keeping them in the page cache (commitlog's
//     Scrubber: pages that were cached stay, pages it brought in are
//     released);
//   - that each record's ConsumeQueue entry points at it (or, for a topic
//     deleted and created again, at a valid record of the same queue and
//     offset), and that every ConsumeQueue entry points inside the
//     retained CommitLog, within one segment, after the entry before it,
//     or at the same record as the entry before it when that record holds
//     both queue offsets (a record with record.FlagEntryPerMessage, such
//     as a Kafka batch of n records, has n consecutive entries locating
//     it; the record is read once for the run) or when both stand for
//     records lost in a repair's hole record (holes.go) — what Check
//     accepts;
//   - the index files' structure (index.Index.Scrub).
//
// What it finds is a Problem, as `keel check` reports it, logged at ERROR
// (in every pass that finds it), counted and kept (ScrubStatus: the last
// maxScrubProblems). A corrupt CommitLog record is also handed to the
// isolation (isolate.go) with the queue entry pointing at it when one can
// be found. A read error is a problem too, and the rest of the segment (or
// index file) is skipped for the pass. The scrubber changes no byte of the
// store and stops while the store is read-only.
//
// CommitLog and index files are read on descriptors of the scrubber's own
// that leave no page they brought in cached (vfs.OpenCold, vfs.ReadCold).
// ConsumeQueue entries are read through the queue (20 bytes a record, a
// fiftieth of the log for 1 KiB messages), with its page cache.
//
// Rate: Config.ScrubBytesPerSecond (0: off). Every tick the scrubber adds
// rate × (time since the last tick, from Config.Now) to its budget, capped
// at one second's worth, and reads while the budget is positive; a record
// larger than the budget is read whole and the debt is paid by the next
// ticks, so over any run of ticks it reads at most rate × elapsed plus one
// record. ConsumeQueue entries count their 20 bytes; index files count the
// bytes read. A pass starts at most once per ScrubPassInterval.

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/store/index"
	"github.com/keelmq/keel/internal/store/record"
)

// Scrubber limits and defaults.
const (
	// DefaultScrubPassInterval is how long after a pass started the next
	// one may start.
	DefaultScrubPassInterval = time.Hour
	// scrubTick is the period of the scrubber's ticker.
	scrubTick = 100 * time.Millisecond
	// maxScrubProblems bounds the problems ScrubStatus keeps.
	maxScrubProblems = 100
	// scrubQueueBatch is how many ConsumeQueue entries one read takes.
	scrubQueueBatch = 256
)

// Scrub phases of a pass.
const (
	scrubCommitLog = iota
	scrubQueues
	scrubIndex
	scrubDone
)

// scrubber is the scrubber's state. Only its goroutine touches the fields
// above mu.
type scrubber struct {
	parked    atomic.Bool // the goroutine is parked (scrubPark); tests wait for it
	cursor    *commitlog.Scrubber
	phase     int
	budget    float64 // bytes it may read now (negative: debt)
	lastTick  time.Time
	passStart time.Time
	queues    []queueRef // the queues of this pass
	queueAt   int        // index in queues
	entryAt   int64      // next entry of queues[queueAt]
	lastPhys  int64      // the highest PhysOffset of the queue's entries before entryAt
	lastSize  int32      // the Size of the first entry at lastPhys
	run       entryRun   // the record consecutive entries at lastPhys locate, once read
	runBuf    []byte
	indexAt   index.ScrubPos

	mu       sync.Mutex // guards the fields below
	bytes    int64
	passes   int64
	problems int64
	recent   []Problem
}

// ScrubStatus is what the scrubber has done and found since the store
// opened.
type ScrubStatus struct {
	BytesPerSecond int64 // the configured rate; 0: the scrubber is off
	Bytes          int64 // bytes read
	Passes         int64 // completed passes over the whole store
	Problems       int64 // problems found
	Recent         []Problem
}

// ScrubStatus returns the scrubber's counters and its most recent findings.
func (s *Store) ScrubStatus() ScrubStatus {
	sc := &s.scrub
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return ScrubStatus{BytesPerSecond: s.cfg.ScrubBytesPerSecond, Bytes: sc.bytes, Passes: sc.passes,
		Problems: sc.problems, Recent: append([]Problem(nil), sc.recent...)}
}

// runScrubber is the scrubber's goroutine. With the scrubber off it only
// retries a registry write that failed (isolate.go). With nothing to do
// (no write to retry, and the scrubber off or its pass done and the next
// not due) it parks, its ticker stopped, until the next pass is due or a
// registry write fails (scrubWake).
func (s *Store) runScrubber() {
	var (
		ticks <-chan time.Time
		t     *time.Ticker // nil with Config.ScrubTicker: the test drives it
	)
	if s.cfg.ScrubTicker != nil {
		c, stop := s.cfg.ScrubTicker()
		defer stop()
		ticks = c
	} else {
		t = time.NewTicker(scrubTick)
		defer t.Stop()
		ticks = t.C
	}
	defer func() {
		if s.scrub.cursor != nil {
			s.scrub.cursor.Close()
		}
	}()
	s.scrub.lastTick = s.cfg.Now()
	for {
		select {
		case <-s.stop:
			return
		case <-ticks:
		}
		s.retryIsolated()
		if s.cfg.ScrubBytesPerSecond > 0 && s.Err() == nil {
			s.scrubTickOnce()
		}
		if t == nil {
			continue
		}
		if d, idle := s.scrubIdleFor(); idle {
			t.Stop()
			if !s.scrubPark(d) {
				return
			}
			t.Reset(scrubTick)
		}
	}
}

// scrubIdleFor reports whether the scrubber has nothing to do, and for how
// long (0: until woken).
func (s *Store) scrubIdleFor() (time.Duration, bool) {
	s.iso.mu.Lock()
	dirty := s.iso.dirty
	s.iso.mu.Unlock()
	switch sc := &s.scrub; {
	case dirty:
		return 0, false
	case s.cfg.ScrubBytesPerSecond == 0 || s.Err() != nil:
		return 0, true
	case sc.phase == scrubDone && !sc.passStart.IsZero():
		d := s.cfg.scrubPassInterval() - s.cfg.Now().Sub(sc.passStart)
		return d, d > 0
	}
	return 0, false
}

// scrubPark waits for d (0: no limit), a wake or the store's stop; false:
// stopped.
func (s *Store) scrubPark(d time.Duration) bool {
	var due <-chan time.Time
	if d > 0 {
		tm := time.NewTimer(d)
		defer tm.Stop()
		due = tm.C
	}
	s.scrub.parked.Store(true)
	defer s.scrub.parked.Store(false)
	select {
	case <-s.stop:
		return false
	case <-s.scrubWake:
	case <-due:
	}
	return true
}

// scrubTickOnce adds the tick's budget and reads while it lasts.
func (s *Store) scrubTickOnce() {
	sc := &s.scrub
	now := s.cfg.Now()
	rate := float64(s.cfg.ScrubBytesPerSecond)
	sc.budget = min(sc.budget+rate*max(now.Sub(sc.lastTick), 0).Seconds(), rate)
	sc.lastTick = now
	for sc.budget > 0 {
		if sc.phase == scrubDone || sc.cursor == nil {
			if !sc.passStart.IsZero() && now.Sub(sc.passStart) < s.cfg.scrubPassInterval() {
				return
			}
			s.startScrubPass(now)
		}
		n, err := s.scrubStep(int64(sc.budget))
		if err != nil {
			s.scrubReadFailed(err)
			return
		}
		sc.budget -= float64(n)
		sc.mu.Lock()
		sc.bytes += n
		sc.mu.Unlock()
		if n == 0 && sc.phase != scrubDone {
			sc.phase++ // this phase is done
			if sc.phase == scrubDone {
				sc.mu.Lock()
				sc.passes++
				sc.mu.Unlock()
			}
		}
	}
}

func (s *Store) startScrubPass(now time.Time) {
	sc := &s.scrub
	sc.passStart, sc.phase = now, scrubCommitLog
	if sc.cursor != nil {
		sc.cursor.Close()
	}
	sc.cursor = s.log.NewScrubber(s.log.MinOffset())
	sc.queues, sc.queueAt, sc.entryAt = s.allQueues(), 0, -1
	sc.indexAt = index.ScrubPos{}
}

// scrubStep does one bounded step of the current phase and returns the
// bytes it read; 0 means the phase is finished.
func (s *Store) scrubStep(maxBytes int64) (int64, error) {
	sc := &s.scrub
	switch sc.phase {
	case scrubCommitLog:
		limit := min(s.VisibleOffset(), s.log.FlushedOffset())
		return sc.cursor.Step(limit, maxBytes, s.scrubRecord, s.scrubBadEntry)
	case scrubQueues:
		return s.scrubQueueStep(maxBytes)
	case scrubIndex:
		return s.scrubIndexStep(maxBytes)
	}
	return 0, nil
}

// scrubReadFailed reports a read error of the scrubber as a problem and
// moves past what it could not read (the rest of the CommitLog segment, or
// the index file), so that a bad sector neither stops scrubbing nor floods
// the log; the next pass tries again.
func (s *Store) scrubReadFailed(err error) {
	sc := &s.scrub
	switch sc.phase {
	case scrubCommitLog:
		pos := sc.cursor.Offset()
		s.scrubProblem(Problem{File: s.segPath(pos), Offset: pos,
			Msg: fmt.Sprintf("read failed; the rest of the segment is not scrubbed in this pass: %v", err)})
		sc.cursor.SkipSegment()
	case scrubIndex:
		s.scrubProblem(Problem{File: s.path(indexDir), Offset: sc.indexAt.At,
			Msg: fmt.Sprintf("read of index file %d failed; not scrubbed in this pass: %v", sc.indexAt.Seq, err)})
		sc.indexAt = index.ScrubPos{Seq: sc.indexAt.Seq + 1}
	}
}

// scrubProblem records a finding.
func (s *Store) scrubProblem(p Problem) {
	sc := &s.scrub
	sc.mu.Lock()
	sc.problems++
	if len(sc.recent) == maxScrubProblems {
		sc.recent = append(sc.recent[:0], sc.recent[1:]...)
	}
	sc.recent = append(sc.recent, p)
	sc.mu.Unlock()
	s.logger.Error("store: scrub found a problem", "problem", p.String())
}

func (s *Store) segPath(phys int64) string {
	return filepath.Join(s.path(commitLogDir), commitlog.SegmentName(s.log.SegmentStart(phys)))
}

func (s *Store) queuePath(topic string, qid int32) string {
	return filepath.Join(s.path(consumeQueueDir), topic, strconv.Itoa(int(qid)))
}

// scrubBadEntry handles a CommitLog entry that failed verification: a
// problem, and the record isolated with its queue entry if one is found.
func (s *Store) scrubBadEntry(f commitlog.ScrubFinding) {
	s.scrubProblem(Problem{File: s.segPath(f.Offset), Offset: f.Offset,
		Msg: fmt.Sprintf("corrupt entry found by the scrubber (scrubbing resumes at %d): %s", f.Next, f.Reason)})
	r := IsolatedRecord{QueueID: -1, QueueOffset: -1, PhysOffset: f.Offset, Size: f.Size, FoundBy: FoundByScrub, Reason: f.Reason}
	if ref, qo, ok := s.entryPointingAt(f); ok {
		r.Topic, r.QueueID, r.QueueOffset = ref.topic, ref.id, qo
		var e [1]consumequeue.Entry
		if n, _ := ref.q.Get(qo, e[:]); n == 1 {
			r.Size = e[0].Size // the entry's size: the record's own may be the damage
		}
	}
	s.isolate(r)
}

// entryPointingAt finds the ConsumeQueue entry of a damaged record from
// the queue id and offset its header claims (fixed positions, which the
// damage may have spared): an entry of that id and offset, in any topic,
// pointing at the record's offset.
func (s *Store) entryPointingAt(f commitlog.ScrubFinding) (queueRef, int64, bool) {
	if len(f.Head) < message.MinRecordBytes && len(f.Head) < 32 {
		return queueRef{}, 0, false
	}
	if recordType(f.Head) != record.RocketMQ {
		return queueRef{}, 0, false // an envelope's queues are not at fixed positions
	}
	v := message.View(f.Head)
	qid, qo := v.QueueID(), v.QueueOffset()
	for _, ref := range s.allQueues() {
		if ref.id != qid || qo < ref.q.MinOffset() || qo >= ref.q.MaxOffset() {
			continue
		}
		var e [1]consumequeue.Entry
		if n, err := ref.q.Get(qo, e[:]); err == nil && n == 1 && e[0].PhysOffset == f.Offset {
			return ref, qo, true
		}
	}
	return queueRef{}, 0, false
}

// scrubRecord checks that a verified record's ConsumeQueue entry points at
// it. A topic deleted and created again reuses queue offsets, so an entry
// pointing elsewhere is a problem only if what it points at is not a valid
// record of the same queue and offset.
func (s *Store) scrubRecord(phys int64, rec []byte) {
	if recordType(rec) != record.RocketMQ {
		n := record.Envelope(rec).Entries()
		record.Envelope(rec).EachDest(func(_ int, topic []byte, qid int32, qo, _ int64, _ int) error {
			for i := range n {
				s.scrubEntryOf(phys, rec, string(topic), qid, qo+i)
			}
			return nil
		})
		return
	}
	v := message.View(rec)
	s.scrubEntryOf(phys, rec, string(v.Topic()), v.QueueID(), v.QueueOffset())
}

// scrubEntryOf checks that entry qo of topic/qid points at the verified
// record rec at phys.
func (s *Store) scrubEntryOf(phys int64, rec []byte, topic string, qid int32, qo int64) {
	q := s.lookupQueue(topic, qid)
	if q == nil || qo < q.MinOffset() || qo >= q.MaxOffset() {
		return // deleted topic, retired entry, or (recreated topic) not reached yet
	}
	var e [1]consumequeue.Entry
	n, err := q.Get(qo, e[:])
	if err != nil || n != 1 || (e[0].PhysOffset == phys && e[0].Size == int32(len(rec))) {
		return
	}
	other, err := s.log.ReadEntry(e[0].PhysOffset, e[0].Size, nil)
	if err == nil {
		err = recordBelongs(other, e[0].PhysOffset, topic, qid, qo)
	}
	if err != nil && !commitlog.IsNoRecord(err) {
		s.scrubProblem(Problem{File: s.queuePath(topic, qid), Offset: qo,
			Msg: fmt.Sprintf("entry points at %d (size %d), not at its record at %d: %v", e[0].PhysOffset, e[0].Size, phys, err)})
	}
}

// scrubQueueStep checks a batch of ConsumeQueue entries: inside the
// retained CommitLog below the dispatched offset, within one segment, after
// the entry before.
func (s *Store) scrubQueueStep(maxBytes int64) (int64, error) {
	sc := &s.scrub
	for sc.queueAt < len(sc.queues) {
		ref := sc.queues[sc.queueAt]
		if sc.entryAt < 0 {
			sc.entryAt, sc.lastPhys, sc.run = ref.q.MinOffset(), -1, entryRun{phys: -1}
		}
		hi := ref.q.MaxOffset()
		if sc.entryAt >= hi || s.lookupQueue(ref.topic, ref.id) != ref.q {
			sc.queueAt, sc.entryAt = sc.queueAt+1, -1
			continue
		}
		var ents [scrubQueueBatch]consumequeue.Entry
		want := min(int64(len(ents)), hi-sc.entryAt, max(maxBytes/consumequeue.EntrySize, 1))
		n, err := ref.q.Get(sc.entryAt, ents[:want])
		if err != nil || n == 0 {
			sc.queueAt, sc.entryAt = sc.queueAt+1, -1 // retention or deletion raced us: next queue
			continue
		}
		// Entries repeating a record read it (once per run): the step
		// ends when they have used the budget.
		read, i := int64(0), 0
		for i < n && (i == 0 || read < maxBytes) {
			r, later := s.scrubEntry(ref, sc.entryAt+int64(i), ents[i])
			read += consumequeue.EntrySize + r
			if later {
				// Its record is being dispatched, and so are the entries
				// after it: the queue's tail waits for the next pass.
				sc.queueAt, sc.entryAt = sc.queueAt+1, -1
				return read, nil
			}
			i++
		}
		sc.entryAt += int64(i)
		return read, nil
	}
	return 0, nil
}

// scrubEntry checks one ConsumeQueue entry and returns the CommitLog bytes
// it read to do so (only for an entry repeating the one before it). later
// reports an entry not checked yet: the dispatcher writes a record's
// entries before the dispatched (visible) offset passes the record, so an
// entry past that offset but within the written log is one being
// dispatched (or, on a SYNC_MASTER, of a tail not yet shown), checked by a
// later pass; only one past the written log is a problem.
func (s *Store) scrubEntry(ref queueRef, qo int64, e consumequeue.Entry) (read int64, later bool) {
	sc := &s.scrub
	defer func() {
		if !later && e.PhysOffset > sc.lastPhys {
			sc.lastPhys, sc.lastSize = e.PhysOffset, e.Size
		}
	}()
	if e.PhysOffset < s.log.MinOffset() {
		return 0, false // retired with its segment
	}
	var why string
	end := e.PhysOffset + int64(e.Size) + commitlog.TrailerBytes
	switch {
	case e.PhysOffset < sc.lastPhys:
		why = fmt.Sprintf("not after the entry before it (at %d)", sc.lastPhys)
	case e.PhysOffset == sc.lastPhys:
		why, read = s.scrubRepeat(ref, qo, e) // the entry before had these bounds checked
	case e.Size != holeEntrySize && (e.Size < int32(min(message.MinRecordBytes, record.HeaderBytes)) || int64(e.Size) > s.cfg.maxRecordBytes()):
		why = fmt.Sprintf("size %d out of range", e.Size)
	case end > s.VisibleOffset() && end <= s.log.WrittenOffset():
		return 0, true // being dispatched
	case end > s.VisibleOffset():
		why = fmt.Sprintf("points past the dispatched offset %d and the written log", s.VisibleOffset())
	case s.log.SegmentStart(e.PhysOffset) != s.log.SegmentStart(end-1):
		why = "crosses a segment boundary"
	case e.Size == holeEntrySize:
		why, read = s.scrubHoleEntry(e)
	}
	if why != "" {
		s.scrubProblem(Problem{File: s.queuePath(ref.topic, ref.id), Offset: qo,
			Msg: fmt.Sprintf("entry points at %d (size %d): %s", e.PhysOffset, e.Size, why)})
	}
	return read, false
}

// scrubHoleEntry checks an entry of the size that stands for a record lost
// in a repair's hole record (holes.go): it must locate a hole, and the
// entries repeating it are entries of lost records too. It returns why not
// ("" if it does) and the bytes read.
func (s *Store) scrubHoleEntry(e consumequeue.Entry) (string, int64) {
	sc := &s.scrub
	_, err := sc.cursor.ReadEntry(e.PhysOffset, e.Size, sc.runBuf)
	if !commitlog.IsHole(err) {
		return fmt.Sprintf("size %d out of range (and no hole record there: %v)", e.Size, err), int64(e.Size) + commitlog.TrailerBytes
	}
	sc.run = entryRun{phys: e.PhysOffset, from: math.MinInt64, to: math.MaxInt64}
	return "", int64(e.Size) + commitlog.TrailerBytes
}

// entryRun is the record that consecutive entries of a queue locate, as
// the scrubber read it for the first entry repeating the one before: the
// queue offsets [from, to) it holds in the queue, or the error reading it.
type entryRun struct {
	phys     int64 // -1: none read in this queue
	from, to int64
	err      error
	reported bool // err was reported
}

// scrubRepeat checks an entry locating the same CommitLog offset as the
// entry before it. That is legal for the consecutive entries of one record
// holding several logical messages of the queue (record.FlagEntryPerMessage:
// a Kafka batch of n records has n entries), and for entries of records
// lost in a repair's hole record, which all point at the hole (holes.go);
// anything else is disorder, as Check finds it (the record does not hold
// the entry). The record is read once per run of entries, around the page
// cache. It returns why the entry is wrong ("" if it is not) and the bytes
// read.
func (s *Store) scrubRepeat(ref queueRef, qo int64, e consumequeue.Entry) (string, int64) {
	sc := &s.scrub
	before := fmt.Sprintf("not after the entry before it (at %d)", sc.lastPhys)
	if e.Size != sc.lastSize {
		return fmt.Sprintf("%s, whose size is %d", before, sc.lastSize), 0
	}
	var read int64
	if sc.run.phys != e.PhysOffset {
		read = int64(e.Size) + commitlog.TrailerBytes
		sc.run = s.readRun(ref, qo, e)
	}
	switch r := &sc.run; {
	case r.err != nil && r.reported:
		return "", read // the record is reported (here and by the CommitLog phase); not each entry of its run
	case r.err != nil:
		r.reported = true
		return fmt.Sprintf("%s, and its record cannot be read: %v", before, r.err), read
	case qo < r.from || qo >= r.to:
		return fmt.Sprintf("%s, and its record holds queue offsets [%d, %d) of this queue, not %d", before, r.from, r.to, qo), read
	}
	return "", read
}

// readRun reads the record entry e locates for the run of entries of ref
// repeating it.
func (s *Store) readRun(ref queueRef, qo int64, e consumequeue.Entry) entryRun {
	sc := &s.scrub
	run := entryRun{phys: e.PhysOffset}
	rec, err := sc.cursor.ReadEntry(e.PhysOffset, e.Size, sc.runBuf)
	if rec != nil {
		sc.runBuf = rec[:cap(rec)]
	}
	switch {
	case commitlog.IsHole(err):
		run.from, run.to = math.MinInt64, math.MaxInt64 // every entry of a lost record locates the hole
	case err != nil:
		run.err = err
	default:
		run.from, run.to = heldOffsets(rec, ref.topic, ref.id, qo)
	}
	return run
}

// heldOffsets returns the queue offsets [from, to) of (topic, qid) that the
// verified record rec holds: the destination's range holding qo if it has
// one, else its first destination of that queue; an empty range if none.
func heldOffsets(rec []byte, topic string, qid int32, qo int64) (from, to int64) {
	if recordType(rec) == record.RocketMQ {
		v := message.View(rec)
		if string(v.Topic()) != topic || v.QueueID() != qid {
			return 0, 0
		}
		return v.QueueOffset(), v.QueueOffset() + 1
	}
	env := record.Envelope(rec)
	n, found := env.Entries(), false
	env.EachDest(func(_ int, t []byte, id int32, o, _ int64, _ int) error {
		if id == qid && string(t) == topic && (!found || qo >= o && qo-o < n) {
			from, to, found = o, o+n, true
		}
		return nil
	})
	return from, to
}

// scrubIndexStep checks a bounded part of the index files.
func (s *Store) scrubIndexStep(maxBytes int64) (int64, error) {
	sc := &s.scrub
	for {
		next, n, done, err := s.index.Scrub(sc.indexAt, maxBytes, func(path string, at int64, msg string) {
			s.scrubProblem(Problem{File: path, Offset: at, Msg: msg})
		})
		if done || err != nil {
			return 0, err
		}
		sc.indexAt = next
		if n > 0 {
			return n, nil
		}
	}
}
