package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/consumequeue"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// putEnvelope appends an enveloped record with flags and returns its
// CommitLog offset.
func putEnvelope(t *testing.T, s *Store, typ record.Type, flags uint16, messages int32, dests []record.Dest, body []byte) int64 {
	t.Helper()
	rec, err := record.AppendEnvelopeFlags(nil, typ, flags, messages, dests, body)
	if err != nil {
		t.Fatal(err)
	}
	r, phys := s.PutRecord(context.Background(), rec)
	if r.Status != PutOK {
		t.Fatalf("put %v record: %v %v", typ, r.Status, r.Err)
	}
	return phys
}

// putEveryShape writes every shape of record the store holds, several of
// them sharing queues: RocketMQ messages alone and in batches, Kafka
// batches of one and several records (one entry per record; plain and
// compressed bodies, which the store does not look into), a Kafka batch of
// an earlier release (one entry for all its records), AMQP messages to one
// queue and fanned out to three, and system records. It returns how many
// entries each queue must hold.
func putEveryShape(t *testing.T, s *Store) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(24, 1)) // stands for a compressed batch: bytes with no structure
	compressed := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	kafka := func(topic string, qid int32, n int32, body []byte) {
		putEnvelope(t, s, record.KafkaBatch, record.FlagEntryPerMessage, n, []record.Dest{{Topic: topic, QueueID: qid}}, body)
	}
	amqp := func(body string, topics ...string) {
		dests := make([]record.Dest, len(topics))
		for i, tp := range topics {
			dests[i] = record.Dest{Topic: tp, QueueID: 0, TagsCode: int64(i)}
		}
		putEnvelope(t, s, record.AMQP, 0, 1, dests, []byte(body))
	}
	const rounds = 10 // over two 64 KiB segments
	for round := range rounds {
		put(t, s, newMsg("R", 0, fmt.Sprint("single ", round), map[string]string{"KEYS": fmt.Sprint("k", round)}))
		batch := make([]*message.Message, 4)
		for i := range batch {
			batch[i] = newMsg("R", 1, fmt.Sprintf("batch %d/%d", round, i), nil)
		}
		if r := s.PutMessages(ctx, batch); r.Status != PutOK {
			t.Fatalf("put batch: %v %v", r.Status, r.Err)
		}
		kafka("K", 0, 3, []byte(strings.Repeat("kafka batch of three ", 4)))
		kafka("K", 0, 1, []byte("kafka batch of one"))
		put(t, s, newMsg("K", 0, fmt.Sprint("rocketmq between batches ", round), nil)) // one queue, two families
		kafka("K", 0, 5, compressed(300))
		kafka("K", 1, 64, compressed(6000))
		putEnvelope(t, s, record.KafkaBatch, 0, 3, []record.Dest{{Topic: "K", QueueID: 2}}, []byte("earlier release"))
		amqp(fmt.Sprint("amqp ", round), "A1")
		amqp(fmt.Sprint("amqp fan-out ", round), "A1", "A2", "A3")
		putSystem(t, s, &record.SystemRecord{Kind: record.KindOffsets,
			Offsets: []record.OffsetEntry{{Group: "g", Topic: "K", QueueID: 0, Offset: int64(round)}}})
	}
	return map[string]int64{"R/0": rounds, "R/1": rounds * 4, "K/0": rounds * 10, "K/1": rounds * 64, "K/2": rounds,
		"A1/0": rounds * 2, "A2/0": rounds, "A3/0": rounds}
}

// waitEntries waits until every queue of want has its entries.
func waitEntries(t *testing.T, s *Store, want map[string]int64) {
	t.Helper()
	for q, n := range want {
		var topic string
		var qid int32
		fmt.Sscanf(strings.Replace(q, "/", " ", 1), "%s %d", &topic, &qid)
		waitVisible(t, s, topic, qid, n)
	}
}

// scrubPasses runs the scrubber of s (driven by d) for two whole passes and
// fails the test on any problem or isolated record.
func scrubPasses(t *testing.T, s *Store, d *scrubDriver, what string) {
	t.Helper()
	d.tickUntil(t, 1000, func() bool { return s.ScrubStatus().Passes >= 2 })
	if st := s.ScrubStatus(); st.Problems != 0 || len(s.Isolated()) != 0 {
		t.Fatalf("%s: the scrubber reported a sound store: %d problems %v, isolated %v", what, st.Problems, st.Recent[:min(len(st.Recent), 3)], s.Isolated())
	}
}

// checkSound runs Check on the stopped store of cfg and fails the test on
// a problem.
func checkSound(t *testing.T, cfg Config, what string) Report {
	t.Helper()
	rep, err := Check(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("%s: check found problems in a sound store: %v", what, rep.Problems)
	}
	return rep
}

// The scrubber finds nothing in a sound store holding every shape of
// record, on a single broker and on a replica fed its log, and Check
// agrees: several consecutive entries locating one record (a Kafka batch
// of n records) are the legal shape, not disorder.
func TestScrubberEveryRecordShape(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	master := mustOpen(t, cfg)
	want := putEveryShape(t, master)
	waitEntries(t, master, want)

	rcfg := testConfig(vfs.NewMem())
	rcfg.Replica = true
	replica := mustOpen(t, rcfg)
	copyLog(t, master, replica, 4<<10)
	waitEntries(t, replica, want)
	if err := master.Close(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		cfg  Config
	}{{"single broker", cfg}, {"replica", rcfg}} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			d := newScrubDriver(&cfg, 64<<10, time.Second)
			s := mustOpen(t, cfg)
			if c.cfg.Replica {
				s.AdvanceReplicated(s.Offset(Written)) // what its master confirmed
			}
			waitEntries(t, s, want)
			scrubPasses(t, s, d, c.name)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			rep := checkSound(t, c.cfg, c.name)
			if got := CountKinds(rep.Warnings); len(got) != 1 || got[0].Kind != KindSharedEntry {
				t.Fatalf("%s: warnings %v, want only the earlier release's batches", c.name, rep.Warnings)
			}
		})
	}
}

// writeEntry overwrites ConsumeQueue entry qo of topic/qid (the first
// queue file) with e.
func writeEntry(t *testing.T, fs vfs.FS, topic string, qid int32, qo int64, e consumequeue.Entry) {
	t.Helper()
	dir := fmt.Sprintf("/data/consumequeue/%s/%d", topic, qid)
	names, err := fs.List(dir)
	if err != nil || len(names) == 0 {
		t.Fatalf("consume queue files of %s: %v %v", dir, names, err)
	}
	f, err := fs.OpenFile(dir+"/"+names[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [consumequeue.EntrySize]byte // the entry's layout (package consumequeue)
	binary.BigEndian.PutUint64(b[0:8], uint64(e.PhysOffset))
	binary.BigEndian.PutUint32(b[8:12], uint32(e.Size))
	binary.BigEndian.PutUint64(b[12:20], uint64(e.TagsCode))
	if _, err := f.WriteAt(b[:], qo*consumequeue.EntrySize); err != nil {
		t.Fatal(err)
	}
	f.Sync()
}

// readEntry reads ConsumeQueue entry qo of topic/qid of the stopped store
// cfg.
func readEntry(t *testing.T, cfg Config, topic string, qid int32, qo int64) consumequeue.Entry {
	t.Helper()
	q, err := consumequeue.Open(consumequeue.Config{FS: cfg.FS, Dir: fmt.Sprintf("/data/consumequeue/%s/%d", topic, qid),
		Topic: topic, QueueID: qid, EntriesPerSegment: cfg.ConsumeQueueSegmentEntries})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var e [1]consumequeue.Entry
	if n, err := q.Get(qo, e[:]); n != 1 || err != nil {
		t.Fatalf("entry %s/%d@%d: %d %v", topic, qid, qo, n, err)
	}
	return e[0]
}

// Entries repeating a record that does not hold them are still problems,
// for the scrubber and for Check alike: an entry after a Kafka batch's run
// pointing at the batch again, a RocketMQ record's entry repeated, an
// entry pointing back at an earlier record, and a repeat with another size.
func TestScrubberFlagsIllegalRepeats(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, cfg Config)
	}{
		{"after the batch's entries", func(t *testing.T, cfg Config) {
			// K/0 holds 3+1 Kafka entries, then a RocketMQ message at 4.
			writeEntry(t, cfg.FS, "K", 0, 4, readEntry(t, cfg, "K", 0, 3))
		}},
		{"past a batch's count", func(t *testing.T, cfg Config) {
			// K/0 entries 0..2 are a batch of three; 3 is a batch of one.
			writeEntry(t, cfg.FS, "K", 0, 3, readEntry(t, cfg, "K", 0, 2))
		}},
		{"a RocketMQ entry repeated", func(t *testing.T, cfg Config) {
			writeEntry(t, cfg.FS, "R", 1, 2, readEntry(t, cfg, "R", 1, 1))
		}},
		{"back to an earlier record", func(t *testing.T, cfg Config) {
			writeEntry(t, cfg.FS, "K", 0, 11, readEntry(t, cfg, "K", 0, 0))
		}},
		{"a repeat with another size", func(t *testing.T, cfg Config) {
			e := readEntry(t, cfg, "K", 1, 5)
			e.Size -= 8
			writeEntry(t, cfg.FS, "K", 1, 5, e)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(vfs.NewMem())
			cfg.FlushDiskType = SyncFlush
			s := mustOpen(t, cfg)
			waitEntries(t, s, putEveryShape(t, s))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			c.damage(t, cfg)
			if rep, err := Check(cfg); err != nil || rep.OK() {
				t.Fatalf("check of the damaged store: %v, problems %v", err, rep.Problems)
			}
			d := newScrubDriver(&cfg, 64<<10, time.Second)
			s = mustOpen(t, cfg)
			defer s.Close()
			d.tickUntil(t, 1000, func() bool { return s.ScrubStatus().Passes >= 1 })
			st := s.ScrubStatus()
			disorder := false
			for _, p := range st.Recent {
				if !strings.Contains(p.File, "consumequeue/") {
					t.Fatalf("problem outside the damaged queue: %v", p)
				}
				disorder = disorder || strings.Contains(p.Msg, "not after the entry before it")
			}
			if !disorder {
				t.Fatalf("the scrubber did not find the entry out of order: %v", st.Recent)
			}
		})
	}
}

// Records lost in one hole record, never dispatched: their queue offsets
// are kept by entries that all point at the hole (holes.go). The scrubber
// passes them, as Check counts them as lost, not as problems.
func TestScrubberPassesEntriesOfAHole(t *testing.T) {
	fx := newCorruptFixture(t, true)
	fx.damage16(t, 5)
	fx.damage16(t, 6) // one hole covers both
	removeTree(t, fx.fs, "/data/consumequeue")
	fx.fs.Remove("/data/checkpoint")
	fx.cfg.RepairCorruption = true
	s := mustOpen(t, fx.cfg)
	s.Close()
	rep := checkSound(t, fx.cfg, "after the repair")
	if len(rep.Holes) != 1 || rep.LostEntries != 2 {
		t.Fatalf("check after the repair: holes %v, %d lost entries; want one hole and two", rep.Holes, rep.LostEntries)
	}
	fx.cfg.RepairCorruption = false
	d := newScrubDriver(&fx.cfg, 64<<10, time.Second)
	s = mustOpen(t, fx.cfg)
	defer s.Close()
	scrubPasses(t, s, d, "a repaired store")
}

// Reading the record a run of entries repeats counts against the rate:
// over a queue of many Kafka batches of two records each, every tick reads
// at most a second's budget plus one record.
func TestScrubberRateBoundWithBatches(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	const batches, bodyBytes = 300, 3000
	for i := range batches {
		putEnvelope(t, s, record.KafkaBatch, record.FlagEntryPerMessage, 2, []record.Dest{{Topic: "K", QueueID: 0}},
			[]byte(fmt.Sprintf("%03d%s", i, strings.Repeat("k", bodyBytes))))
	}
	waitVisible(t, s, "K", 0, 2*batches)
	s.Close()
	const rate = 8 << 10
	d := newScrubDriver(&cfg, rate, 250*time.Millisecond)
	s = mustOpen(t, cfg)
	defer s.Close()
	maxEntry := int64(bodyBytes + 200)
	var prev int64
	for i := 1; s.ScrubStatus().Passes < 1; i++ {
		if i > 2000 {
			t.Fatal("no pass completed")
		}
		d.tick()
		d.barrier()
		got := s.ScrubStatus().Bytes
		if got-prev > rate+maxEntry {
			t.Fatalf("tick %d read %d bytes, more than a second's budget (%d) plus a record", i, got-prev, rate)
		}
		prev = got
	}
	if st := s.ScrubStatus(); st.Problems != 0 {
		t.Fatalf("%d problems: %v", st.Problems, st.Recent[:min(3, len(st.Recent))])
	}
}
