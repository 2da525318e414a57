package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

func putRecord(t *testing.T, s *Store, typ record.Type, messages int32, dests []record.Dest, body string) int64 {
	t.Helper()
	rec, err := record.AppendEnvelope(nil, typ, messages, dests, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	r, phys := s.PutRecord(context.Background(), rec)
	if r.Status != PutOK {
		t.Fatalf("put record: %v %v", r.Status, r.Err)
	}
	return phys
}

// getOne reads the record at (topic, qid, off) and returns a copy.
func getOne(t *testing.T, s *Store, topic string, qid int32, off int64) []byte {
	t.Helper()
	r, err := s.GetMessage(topic, qid, off, 1, 1<<20, nil)
	if err != nil || r.Status != Found || len(r.Records) != 1 {
		t.Fatalf("get %s/%d@%d: %v %+v", topic, qid, off, err, r)
	}
	defer r.Release()
	return append([]byte(nil), r.Records[0]...)
}

// TestOneRecordInTwoQueues: the invariant that one record may be
// referenced from several ConsumeQueues (AMQP fan-out). An AMQP record
// with two destinations is stored once and gets an entry in each queue,
// at offsets dense with the RocketMQ messages of the same queue; readers of
// both queues get the same bytes, subscribers hear of both entries, and
// the entries survive a restart, a rebuild from the CommitLog and Check.
func TestOneRecordInTwoQueues(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	s := mustOpen(t, cfg)
	events := make(chan string, 4)
	s.OnVisible(func(topic string, qid int32, qo, code int64) {
		events <- fmt.Sprintf("%s/%d@%d:%d", topic, qid, qo, code)
	})
	put(t, s, newMsg("Q1", 0, "rocketmq before", nil))
	<-events
	dests := []record.Dest{{Topic: "Q1", QueueID: 0, TagsCode: 11}, {Topic: "Q2", QueueID: 3, TagsCode: 22}}
	phys := putRecord(t, s, record.AMQP, 1, dests, "fanned out")
	if a, b := <-events, <-events; a != "Q1/0@1:11" || b != "Q2/3@0:22" {
		t.Fatalf("events %s, %s", a, b)
	}
	put(t, s, newMsg("Q1", 0, "rocketmq after", nil))
	waitVisible(t, s, "Q1", 0, 3)
	check := func(s *Store) {
		t.Helper()
		a, b := getOne(t, s, "Q1", 0, 1), getOne(t, s, "Q2", 3, 0)
		if string(a) != string(b) || record.Envelope(a).PhysOffset() != phys || string(record.Envelope(a).Body()) != "fanned out" {
			t.Fatalf("the two queues do not reference the one record at %d", phys)
		}
		if s.MaxOffset("Q1", 0) != 3 || s.MaxOffset("Q2", 3) != 1 {
			t.Fatalf("max offsets %d %d", s.MaxOffset("Q1", 0), s.MaxOffset("Q2", 3))
		}
		// A tag filter sees the destination's tag code.
		r, err := s.GetMessage("Q2", 3, 0, 1, 1<<20, codeFilter(99))
		if err != nil || r.Status != NoMatchedMessage {
			t.Fatalf("filtered get: %v %v", err, r.Status)
		}
	}
	check(s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(cfg)
	if err != nil || !rep.OK() || rep.Records != 3 || rep.QueueEntries != 4 {
		t.Fatalf("check: %v %v records %d entries %d", err, rep.Problems, rep.Records, rep.QueueEntries)
	}
	s = mustOpen(t, cfg)
	check(s)
	s.Close()
	// Rebuilt from the CommitLog alone.
	for _, p := range []string{"/data/consumequeue", "/data/checkpoint", "/data/index"} {
		removeTree(t, fs, p)
	}
	s = mustOpen(t, cfg)
	defer s.Close()
	check(s)
}

type codeFilter int64

func (f codeFilter) MatchTagsCode(code int64) bool   { return code == int64(f) }
func (f codeFilter) MatchRecord(v message.View) bool { return true }

// TestEntryPerMessage: the invariant that a record holding n logical
// messages for a queue (record.FlagEntryPerMessage: a Kafka batch of n
// records) has n entries there, all locating it, at n consecutive queue
// offsets dense with the RocketMQ messages of the queue; the body patch
// hook sees the first of them before the record is sealed; subscribers
// hear of the last; the entries survive a restart, a rebuild from the
// CommitLog after the queues are lost, and Check counts them without a
// problem.
func TestEntryPerMessage(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	s := mustOpen(t, cfg)
	events := make(chan int64, 8)
	s.OnVisible(func(topic string, qid int32, qo, code int64) { events <- qo })
	put(t, s, newMsg("K", 0, "rocketmq before", nil))
	<-events
	rec, err := record.AppendEnvelopeFlags(nil, record.KafkaBatch, record.FlagEntryPerMessage, 5,
		[]record.Dest{{Topic: "K", QueueID: 0, TagsCode: 7}}, []byte("first-offset:????????"))
	if err != nil {
		t.Fatal(err)
	}
	var hooked []int64
	r, phys, _ := s.AppendRecordPatched(context.Background(), rec, func(body []byte, dest int, qo, _ int64) {
		hooked = append(hooked, int64(dest), qo)
		binary.BigEndian.PutUint64(body[len(body)-8:], uint64(qo))
	})
	if r.Status != PutOK || len(hooked) != 2 || hooked[0] != 0 || hooked[1] != 1 {
		t.Fatalf("put: %v %v, hook calls %v", r.Status, r.Err, hooked)
	}
	if qo := <-events; qo != 5 {
		t.Fatalf("subscribers told of entry %d, want the last, 5", qo)
	}
	put(t, s, newMsg("K", 0, "rocketmq after", nil))
	waitVisible(t, s, "K", 0, 7)
	check := func(s *Store) {
		t.Helper()
		if s.MaxOffset("K", 0) != 7 {
			t.Fatalf("max offset %d, want 7 (1 + 5 + 1)", s.MaxOffset("K", 0))
		}
		for qo := int64(1); qo <= 5; qo++ {
			e := record.Envelope(getOne(t, s, "K", 0, qo))
			if e.PhysOffset() != phys || e.Messages() != 5 || e.Entries() != 5 || binary.BigEndian.Uint64(e.Body()[len(e.Body())-8:]) != 1 {
				t.Fatalf("entry %d: record at %d with %d messages, body %q", qo, e.PhysOffset(), e.Messages(), e.Body())
			}
		}
		if v := message.View(getOne(t, s, "K", 0, 6)); string(v.Body()) != "rocketmq after" || v.QueueOffset() != 6 {
			t.Fatalf("entry 6: %q at %d", v.Body(), v.QueueOffset())
		}
		// One read over all of them: the record once per entry.
		r, err := s.GetMessage("K", 0, 0, 32, 1<<20, nil)
		if err != nil || r.Status != Found || len(r.Records) != 7 || r.NextOffset != 7 {
			t.Fatalf("get 0..: %v %+v", err, r)
		}
		for i, rec := range r.Records[1:6] {
			if record.Envelope(rec).PhysOffset() != phys || len(rec) != len(r.Records[1]) {
				t.Fatalf("entry %d of the read: another record", i+1)
			}
		}
		r.Release()
	}
	check(s)
	s.Close()
	if rep, err := Check(cfg); err != nil || !rep.OK() || rep.Records != 3 || rep.QueueEntries != 7 || countKind(rep.Warnings, KindSharedEntry) != 0 {
		t.Fatalf("check: %v %v records %d entries %d, warnings %v", err, rep.Problems, rep.Records, rep.QueueEntries, rep.Warnings)
	}
	s = mustOpen(t, cfg)
	check(s)
	s.Close()
	for _, p := range []string{"/data/consumequeue", "/data/checkpoint", "/data/index"} {
		removeTree(t, fs, p)
	}
	s = mustOpen(t, cfg)
	check(s)
	put(t, s, newMsg("K", 0, "after the rebuild", nil))
	waitVisible(t, s, "K", 0, 8)
	if v := message.View(getOne(t, s, "K", 0, 7)); v.QueueOffset() != 7 {
		t.Fatalf("the next message got offset %d after the rebuild, want 7", v.QueueOffset())
	}
	s.Close()
	if rep, err := Check(cfg); err != nil || !rep.OK() || rep.QueueEntries != 8 {
		t.Fatalf("check after the rebuild: %v %v entries %d", err, rep.Problems, rep.QueueEntries)
	}
}

// TestUnflaggedRecordOneEntry: a record without FlagEntryPerMessage (every
// Kafka batch of earlier releases) keeps one entry standing for all its
// messages, so data directories written before the flag read as before.
func TestUnflaggedRecordOneEntry(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	s := mustOpen(t, cfg)
	batch := strings.Repeat("kafka-record;", 5)
	putRecord(t, s, record.KafkaBatch, 5, []record.Dest{{Topic: "K", QueueID: 0}}, batch)
	waitVisible(t, s, "K", 0, 1)
	got := record.Envelope(getOne(t, s, "K", 0, 0))
	if got.Messages() != 5 || got.Entries() != 1 || string(got.Body()) != batch || got.Type() != record.KafkaBatch {
		t.Fatalf("read back %v with %d messages", got.Type(), got.Messages())
	}
	if st := s.Stats(); st.PutMessages != 5 || s.MaxOffset("K", 0) != 1 {
		t.Fatalf("put messages %d, max offset %d", st.PutMessages, s.MaxOffset("K", 0))
	}
	s.Close()
	rep, err := Check(cfg)
	if err != nil || !rep.OK() || rep.QueueEntries != 1 {
		t.Fatalf("check: %v %v", err, rep.Problems)
	}
	// Check tells it (their messages share a queue offset).
	if n := countKind(rep.Warnings, KindSharedEntry); n != 1 {
		t.Fatalf("%d warnings of kind %q, want 1: %v", n, KindSharedEntry, rep.Warnings)
	}
}

func countKind(ps []Problem, kind string) int {
	n := 0
	for _, p := range ps {
		if p.Kind == kind {
			n++
		}
	}
	return n
}

// TestPutRecordRefusesRocketMQAndGarbage: PutRecord takes enveloped types
// only, and checks them.
func TestPutRecordRefusesRocketMQAndGarbage(t *testing.T) {
	s := mustOpen(t, testConfig(vfs.NewMem()))
	defer s.Close()
	m := newMsg("T", 0, "x", nil)
	rocket, _ := m.AppendStored(nil)
	bad, _ := record.AppendEnvelope(nil, record.System, 0, nil, []byte("x"))
	bad[17]++ // BODYLEN
	for name, rec := range map[string][]byte{"rocketmq": rocket, "bad envelope": bad, "short": {1, 2}} {
		if r, phys := s.PutRecord(context.Background(), rec); r.Status != PutMessageIllegal || phys != -1 {
			t.Errorf("%s: %v %d", name, r.Status, phys)
		}
	}
}

// TestUnknownRecordTypeRefusesOpenAndCheck: a record of a type this
// version does not know (a newer release wrote it) makes Open fail and
// Check report it, naming the type's magic and where it is; nothing is
// cut or skipped.
func TestUnknownRecordTypeRefusesOpenAndCheck(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	s := mustOpen(t, cfg)
	put(t, s, newMsg("T", 0, "before", nil))
	phys := putRecord(t, s, record.System, 0, nil, "a system record")
	s.Close()
	f, err := fs.OpenFile("/data/commitlog/"+commitlog.SegmentName(0), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	f.ReadAt(hdr[:], phys)
	n := int64(binary.BigEndian.Uint32(hdr[:]))
	rec := make([]byte, n)
	f.ReadAt(rec, phys)
	binary.BigEndian.PutUint32(rec[4:], 0xDAA3FFFF)
	f.WriteAt(binary.BigEndian.AppendUint32(rec, commitlog.Checksum(rec)), phys)
	f.Sync()
	f.Close()
	before := readAll(t, fs, "/data/commitlog/"+commitlog.SegmentName(0))

	if _, err := Open(cfg); !errors.Is(err, record.ErrUnknownType) || !strings.Contains(err.Error(), "0xdaa3ffff") {
		t.Fatalf("open: %v", err)
	} else {
		t.Logf("open: %v", err)
	}
	rep, err := Check(cfg)
	if err != nil || rep.OK() || !strings.Contains(fmt.Sprint(rep.Problems), "unknown record type") {
		t.Fatalf("check: %v %v", err, rep.Problems)
	}
	if after := readAll(t, fs, "/data/commitlog/"+commitlog.SegmentName(0)); string(after) != string(before) {
		t.Fatal("the CommitLog was changed")
	}
}

func removeTree(t *testing.T, fs vfs.FS, path string) {
	t.Helper()
	if names, err := fs.List(path); err == nil {
		for _, n := range names {
			removeTree(t, fs, path+"/"+n)
		}
	}
	if err := fs.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size, _ := f.Size()
	b := make([]byte, size)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRetentionOfFanOutRecords: retention dates a segment by the store time
// of the record after it, whatever its type, and retires the entries of
// every queue a removed record was in.
func TestRetentionOfFanOutRecords(t *testing.T) {
	clock := newFakeClock()
	clock.Set(time.Date(2026, 1, 2, 4, 10, 0, 0, time.Local))
	cfg := testConfig(vfs.NewMem())
	cfg.Now = clock.Now
	s := mustOpen(t, cfg)
	defer s.Close()
	dests := []record.Dest{{Topic: "A", QueueID: 0}, {Topic: "B", QueueID: 1}}
	body := string(make([]byte, 4000))
	for range 40 {
		putRecord(t, s, record.AMQP, 1, dests, body)
	}
	waitVisible(t, s, "B", 1, 40)
	flushAll(t, s)
	clock.Set(time.Date(2026, 1, 2, 4, 30, 0, 0, time.Local)) // DeleteWhen, well inside FileReservedTime
	s.runRetentionOnce()
	if s.log.MinOffset() != 0 || s.MinOffset("A", 0) != 0 {
		t.Fatalf("retention removed segments that are not expired: log min %d", s.log.MinOffset())
	}
	clock.Set(time.Date(2026, 1, 6, 4, 30, 0, 0, time.Local))
	putRecord(t, s, record.AMQP, 1, dests, body)
	waitVisible(t, s, "B", 1, 41)
	flushAll(t, s)
	s.runRetentionOnce()
	a, b := s.MinOffset("A", 0), s.MinOffset("B", 1)
	if s.log.MinOffset() == 0 || a == 0 || a != b {
		t.Fatalf("after expiry: log min %d, queue mins %d and %d", s.log.MinOffset(), a, b)
	}
}

// TestCheckTellsWrongEntriesOfEnvelopedRecords: Check verifies entries
// against the destinations of an enveloped record: an entry in a queue
// the record is not routed to is a problem, and so is a destination left
// without its entry.
func TestCheckTellsWrongEntriesOfEnvelopedRecords(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	s := mustOpen(t, cfg)
	phys := putRecord(t, s, record.AMQP, 1, []record.Dest{{Topic: "Q1", QueueID: 0}}, "x")
	waitVisible(t, s, "Q1", 0, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	size := int32(len(readAll(t, fs, "/data/commitlog/"+commitlog.SegmentName(0))[phys:]) - commitlog.TrailerBytes)
	q, err := consumequeue.Open(consumequeue.Config{FS: fs, Dir: "/data/consumequeue/Q9/0", Topic: "Q9", QueueID: 0, EntriesPerSegment: cfg.ConsumeQueueSegmentEntries})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Append(0, consumequeue.Entry{PhysOffset: phys, Size: size}); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	removeTree(t, fs, "/data/consumequeue/Q1")
	rep, err := Check(cfg)
	if err != nil {
		t.Fatal(err)
	}
	probs := fmt.Sprint(rep.Problems)
	if !strings.Contains(probs, "no destination Q9/0 offset 0") || !strings.Contains(probs, "record Q1/0 offset 0 has no consume queue entry") {
		t.Fatalf("problems: %v", rep.Problems)
	}
}

// TestEntryPerMessageAfterPowerLoss: after a power loss that took the
// ConsumeQueue's unsynced entries (the CommitLog was synced: SYNC_FLUSH),
// recovery dispatches the record again and rebuilds all n of its entries,
// and the next message continues after them.
func TestEntryPerMessageAfterPowerLoss(t *testing.T) {
	mem := vfs.NewMem()
	cfg := testConfig(mem)
	cfg.FlushDiskType = SyncFlush
	cfg.FlushConsumeQueueInterval = time.Hour // the entries stay unsynced
	s := mustOpen(t, cfg)
	put(t, s, newMsg("K", 0, "before", nil))
	rec, err := record.AppendEnvelopeFlags(nil, record.KafkaBatch, record.FlagEntryPerMessage, 5, []record.Dest{{Topic: "K", QueueID: 0}}, []byte("batch"))
	if err != nil {
		t.Fatal(err)
	}
	r, phys := s.PutRecord(context.Background(), rec)
	if !r.OK() {
		t.Fatal(r.Status, r.Err)
	}
	waitVisible(t, s, "K", 0, 6)
	crashed := cfg
	crashed.FS = mem.CrashClone()
	s.Close()
	if names, _ := crashed.FS.List("/data/consumequeue/K/0"); len(names) != 0 {
		t.Fatalf("the power loss left the queue's files %v: nothing to rebuild", names)
	}
	s = mustOpen(t, crashed)
	if got := s.MaxOffset("K", 0); got != 6 {
		t.Fatalf("after the power loss: max offset %d, want 6", got)
	}
	for qo := int64(1); qo <= 5; qo++ {
		if e := record.Envelope(getOne(t, s, "K", 0, qo)); e.PhysOffset() != phys {
			t.Fatalf("entry %d locates %d, not the record at %d", qo, e.PhysOffset(), phys)
		}
	}
	put(t, s, newMsg("K", 0, "after", nil))
	waitVisible(t, s, "K", 0, 7)
	if v := message.View(getOne(t, s, "K", 0, 6)); string(v.Body()) != "after" {
		t.Fatalf("entry 6: %q", v.Body())
	}
	s.Close()
	if rep, err := Check(crashed); err != nil || !rep.OK() || rep.QueueEntries != 7 {
		t.Fatalf("check: %v %v entries %d", err, rep.Problems, rep.QueueEntries)
	}
}
