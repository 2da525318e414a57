package store

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
)

// readQueue reads queue T/0 from 0 to its end in batches and returns the
// queue offsets served; it fails on a read error or a bad record.
func readQueue(t *testing.T, s *Store, acked []ackedMsg) []int64 {
	t.Helper()
	byOffset := map[int64]ackedMsg{}
	for _, a := range acked {
		byOffset[a.qo] = a
	}
	var served []int64
	for off := int64(0); off < s.MaxOffset("T", 0); {
		r, err := s.GetMessage("T", 0, off, 8, 1<<20, nil)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		for _, rec := range r.Records {
			v := message.View(rec)
			if a := byOffset[v.QueueOffset()]; !bytes.Equal(v.Body(), a.body) || v.PhysOffset() != a.phys {
				t.Fatalf("served a bad record at offset %d", v.QueueOffset())
			}
			served = append(served, v.QueueOffset())
		}
		if r.NextOffset <= off {
			t.Fatalf("no progress at %d: %v", off, r.Status)
		}
		off = r.NextOffset
		r.Release()
	}
	return served
}

func without(msgs []ackedMsg, i int) []ackedMsg {
	return append(append([]ackedMsg(nil), msgs[:i]...), msgs[i+1:]...)
}

// damage16 flips 16 bytes in the body of message i of the fixture and
// returns the bytes of its entry as they are now (what repair must keep in
// quarantine).
func (fx *corruptFixture) damage16(t *testing.T, i int) []byte {
	t.Helper()
	m := fx.msgs[i]
	fx.patch(t, m.phys+200, 16, func(b []byte) {
		for k := range b {
			b[k] ^= 0x5a
		}
	})
	n := fx.sizes[i] + commitlog.TrailerBytes
	seg := m.phys - m.phys%fx.cfg.CommitLogSegmentBytes
	return readAll(t, fx.fs, "/data/commitlog/"+commitlog.SegmentName(seg))[m.phys-seg:][:n]
}

// 16 flipped bytes in one record in the middle of a segment: repair keeps
// every other record (it used to move the rest of the segment to
// quarantine), keeps the damaged bytes in quarantine, and leaves a store
// that Check accepts and that opens again without repair.
func TestRepairKeepsEveryIntactRecord(t *testing.T) {
	fx := newCorruptFixture(t, true)
	const victim = 5
	if fx.msgs[victim+1].phys/fx.cfg.CommitLogSegmentBytes != fx.msgs[victim].phys/fx.cfg.CommitLogSegmentBytes {
		t.Fatal("fixture: the victim must not be the last record of its segment")
	}
	orig := fx.damage16(t, victim)

	rep, err := Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	kinds := CountKinds(rep.Problems)
	if len(rep.Problems) != 2 || len(kinds) != 2 || kinds[0].Count != 1 || kinds[1].Count != 1 {
		t.Fatalf("one damaged record: want one corrupt entry and one queue entry pointing at it, got %v", rep.Problems)
	}
	var ce *commitlog.CorruptionError
	if _, err := Open(fx.cfg); !errors.As(err, &ce) || ce.NextValid != fx.msgs[victim+1].phys {
		t.Fatalf("want a refusal naming the next valid entry %d: %v", fx.msgs[victim+1].phys, err)
	}

	fx.cfg.RepairCorruption = true
	s := mustOpen(t, fx.cfg)
	kept := without(fx.msgs, victim)
	checkAcked(t, s, kept, "after the repair")
	if served := readQueue(t, s, fx.msgs); len(served) != len(kept) {
		t.Fatalf("served %d of the %d intact messages", len(served), len(kept))
	}
	if _, err := s.GetMessage("T", 0, victim, 1, 1<<20, nil); err != nil {
		t.Fatalf("read of the lost message: %v", err)
	}
	if got := s.recovered.Quarantined; got != int64(len(orig)) {
		t.Fatalf("quarantined %d bytes, want the %d of the damaged entry", got, len(orig))
	}
	s.Close()
	names, _ := fx.fs.List("/data/quarantine")
	if len(names) != 1 || !bytes.Equal(readAll(t, fx.fs, "/data/quarantine/"+names[0]), orig) {
		t.Fatalf("quarantine holds %v, want exactly the damaged entry", names)
	}

	rep, err = Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Warnings) != 0 || len(rep.Holes) != 1 || rep.Holes[0].Offset != fx.msgs[victim].phys ||
		rep.LostEntries != 1 || rep.QuarantineFiles != 1 || rep.Records != int64(len(kept)) {
		t.Fatalf("check after the repair: problems %v warnings %v holes %v lost %d quarantine %d records %d",
			rep.Problems, rep.Warnings, rep.Holes, rep.LostEntries, rep.QuarantineFiles, rep.Records)
	}

	t.Logf("SUMMARY 16 flipped bytes in 1 of %d records: %d kept, 1 lost, %d bytes in quarantine; check: %d problems, %d hole, %d lost entry",
		len(fx.msgs), len(kept), len(orig), len(rep.Problems), len(rep.Holes), rep.LostEntries)
	fx.cfg.RepairCorruption = false
	s = mustOpen(t, fx.cfg)
	defer s.Close()
	checkAcked(t, s, kept, "reopened without repair")
	m := newMsg("T", 0, "after", nil)
	put(t, s, m)
	if m.QueueOffset != int64(len(fx.msgs)) {
		t.Fatalf("next put at queue offset %d", m.QueueOffset)
	}
}

// When the ConsumeQueues never held the lost record (rebuilt from nothing
// here), its queue offset still exists after the repair: the entry points
// at the hole record, readers skip it and Check counts it as lost.
func TestRepairKeepsQueueOffsetsOfUndispatchedRecords(t *testing.T) {
	fx := newCorruptFixture(t, true)
	const victim = 5
	fx.damage16(t, victim)
	removeTree(t, fx.fs, "/data/consumequeue")
	fx.fs.Remove("/data/checkpoint")
	fx.cfg.RepairCorruption = true
	s := mustOpen(t, fx.cfg)
	kept := without(fx.msgs, victim)
	if got := s.MaxOffset("T", 0); got != int64(len(fx.msgs)) {
		t.Fatalf("max offset %d after the rebuild, want %d", got, len(fx.msgs))
	}
	checkAcked(t, s, kept, "after the repair")
	if served := readQueue(t, s, fx.msgs); len(served) != len(kept) {
		t.Fatalf("served %d of the %d intact messages", len(served), len(kept))
	}
	s.Close()
	rep, err := Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Holes) != 1 || rep.LostEntries != 1 {
		t.Fatalf("check after the repair: problems %v holes %v lost %d", rep.Problems, rep.Holes, rep.LostEntries)
	}
}

// The scrubber passes a repair's hole record and the queue entry pointing
// at it without a problem: they are the traces of a repair, as for Check.
func TestScrubberPassesRepairedHoles(t *testing.T) {
	fx := newCorruptFixture(t, true)
	fx.damage16(t, 5)
	fx.cfg.RepairCorruption = true
	s := mustOpen(t, fx.cfg)
	s.Close()
	fx.cfg.RepairCorruption = false
	d := newScrubDriver(&fx.cfg, 64<<10, time.Second)
	s = mustOpen(t, fx.cfg)
	defer s.Close()
	d.tickUntil(t, 200, func() bool { return s.ScrubStatus().Passes >= 2 })
	if st := s.ScrubStatus(); st.Problems != 0 || len(s.Isolated()) != 0 {
		t.Fatalf("scrubbing a repaired store: %d problems %v, isolated %v", st.Problems, st.Recent, s.Isolated())
	}
}

// A repair re-dispatches from where verification started, but records the
// index already holds are not indexed again: no "offset went backwards"
// warning, no new index file, no key indexed twice.
func TestRepairDoesNotIndexTwice(t *testing.T) {
	fx := newCorruptFixture(t, true)
	fx.damage16(t, 5)
	filesBefore, _ := fx.fs.List("/data/index")
	logs := &logCounter{}
	fx.cfg.Logger = slog.New(logs)
	fx.cfg.RepairCorruption = true
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	if n := logs.count("WARN index: physical offset went backwards"); n != 0 {
		t.Fatalf("%d warnings that the index offset went backwards during the repair", n)
	}
	if files, _ := fx.fs.List("/data/index"); len(files) != len(filesBefore) {
		t.Fatalf("index files %v after the repair, %v before", files, filesBefore)
	}
	for i, m := range fx.msgs {
		offs, err := s.index.Query("T#"+fmt.Sprint("k", i), 16, 0, math.MaxInt64)
		if err != nil {
			t.Fatal(err)
		}
		if len(offs) != 1 || offs[0] != m.phys {
			t.Fatalf("key k%d indexed at %v, want once at %d", i, offs, m.phys)
		}
	}
}
