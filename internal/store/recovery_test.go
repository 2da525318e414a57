package store

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/store/commitlog"
)

// withVerifyTail lowers verifyTailBytes for one test, so that the 64 KiB
// test segments have a tail shorter than a segment.
func withVerifyTail(t *testing.T, n int64) {
	old := verifyTailBytes
	verifyTailBytes = n
	t.Cleanup(func() { verifyTailBytes = old })
}

// The corrupt fixture's last segment holds messages 24..29 (about 5 KiB
// each): with a 12 KiB tail, Open starts verifying at message 27, the last
// one at least 12 KiB before the end.
const fixtureTail = 12 << 10

func TestCleanRestartVerifiesOnlyTheTail(t *testing.T) {
	withVerifyTail(t, fixtureTail)
	fx := newCorruptFixture(t, true)
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	if got, want := s.recovered.ScannedFrom, fx.msgs[27].phys; got != want || s.recovered.Records != 3 {
		t.Fatalf("verified from %d (%d records), want from message 27 at %d (3 records)", got, s.recovered.Records, want)
	}
	checkAcked(t, s, fx.msgs, "after a clean restart")
	m := newMsg("T", 0, "next", nil)
	put(t, s, m)
	if want := fx.msgs[29].phys + int64(fx.sizes[29]) + commitlog.TrailerBytes; m.QueueOffset != 30 || m.PhysOffset != want {
		t.Fatalf("next put at queue offset %d, phys %d; want 30, %d", m.QueueOffset, m.PhysOffset, want)
	}
}

// Damage inside the verified tail is still found by Open after a clean
// shutdown: a damaged last record is durable data missing, a damaged one
// with valid records after it is corruption in the middle.
func TestCleanRestartFindsDamageInTheTail(t *testing.T) {
	withVerifyTail(t, fixtureTail)
	for name, pos := range fieldOffsets(5000) {
		t.Run(name, func(t *testing.T) {
			fx := newCorruptFixture(t, true)
			fx.patch(t, fx.msgs[29].phys+int64(pos), 1, func(b []byte) { b[0] ^= 0x40 })
			if _, err := Open(fx.cfg); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checkpointed flushed offset") {
				t.Fatalf("damaged last record: %v", err)
			}

			fx = newCorruptFixture(t, true)
			victim := fx.msgs[28]
			fx.patch(t, victim.phys+int64(pos), 1, func(b []byte) { b[0] ^= 0x40 })
			var ce *commitlog.CorruptionError
			if _, err := Open(fx.cfg); !errors.As(err, &ce) || ce.Offset != victim.phys {
				t.Fatalf("damaged record in the tail: %v", err)
			}
		})
	}
}

// Open does not verify the durable log before the tail; a record damaged
// there is found when read, never served, and reported by Check. After a
// crash the same holds for the part below the checkpointed flushed offset.
func TestDamageBeforeTheVerifiedTailIsFoundOnRead(t *testing.T) {
	withVerifyTail(t, fixtureTail)
	for _, crashed := range []bool{false, true} {
		fx := newCorruptFixture(t, true)
		if crashed {
			// Crashed after the last checkpoint covered everything.
			f, err := fx.fs.OpenFile("/data/abort", os.O_RDWR|os.O_CREATE, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		victim := fx.msgs[25]
		fx.patch(t, victim.phys+100, 1, func(b []byte) { b[0] ^= 0x08 })
		s := mustOpen(t, fx.cfg)
		if s.recovered.ScannedFrom <= victim.phys {
			t.Fatalf("crashed=%v: verified from %d, expected to start after the victim at %d", crashed, s.recovered.ScannedFrom, victim.phys)
		}
		// Found on read: isolated and skipped (isolate.go).
		if r, err := s.GetMessage("T", 0, 25, 1, 1<<20, nil); err != nil || len(r.Records) != 1 || r.NextOffset != 27 || len(s.Isolated()) != 1 {
			t.Fatalf("crashed=%v: read at the damaged record: %v %v, isolated %v", crashed, r, err, s.Isolated())
		}
		checkAcked(t, s, fx.msgs[26:], "after the damaged record")
		s.Close()
		rep, err := Check(fx.cfg)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, p := range rep.Problems {
			found = found || p.Offset == victim.phys
		}
		if !found {
			t.Fatalf("crashed=%v: Check did not report the damaged record: %v", crashed, rep.Problems)
		}
	}
}

// After a crash, an unsynced tail written back out of order is handled as
// with a full-segment scan: the invalid entry makes Open verify the whole
// segment before deciding, and the tail is cut into quarantine.
func TestVerifiedTailFallsBackOnAnUnsyncedTail(t *testing.T) {
	withVerifyTail(t, 4<<10)
	fx := newCorruptFixture(t, true)
	f, err := fx.fs.OpenFile("/data/abort", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	victim := fx.msgs[27]
	writeCheckpoint(fx.fs, "/data", checkpoint{PhysFlushed: victim.phys, CQFlushed: victim.phys, IndexFlushed: victim.phys})
	// The log from the victim on was never fdatasynced: the flushed mark
	// says so too.
	if err := commitlog.LowerMark(fx.fs, "/data/commitlog", victim.phys); err != nil {
		t.Fatal(err)
	}
	fx.patch(t, victim.phys+40, 1, func(b []byte) { b[0] ^= 0x01 })
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	if base := fx.msgs[24].phys; s.recovered.ScannedFrom != base {
		t.Fatalf("verified from %d, want the whole segment from %d", s.recovered.ScannedFrom, base)
	}
	checkAcked(t, s, fx.msgs[:27], "unsynced tail")
	if got := s.MaxOffset("T", 0); got != 27 {
		t.Fatalf("max offset %d after the cut, want 27", got)
	}
	if names, _ := fx.fs.List("/data/quarantine"); len(names) != 1 {
		t.Fatalf("the cut bytes must be kept in quarantine: %v", names)
	}
}

// After a process kill (the page cache keeps every write, the flushed
// mark included) the checkpoint lags the log. A byte flipped in an
// acknowledged record past the checkpoint is damage to durable data, the
// mark being past the record: Open refuses, naming it and changing
// nothing, and a repair loses that record alone. It used to be cut, with
// every record after it, as an unsynced tail written back out of order.
func TestKillThenDamageToADurableRecordIsNotCut(t *testing.T) {
	fx := newCorruptFixture(t, true)
	f, err := fx.fs.OpenFile("/data/abort", os.O_RDWR|os.O_CREATE, 0o600) // the kill
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	lag := fx.msgs[20]
	writeCheckpoint(fx.fs, "/data", checkpoint{PhysFlushed: lag.phys, CQFlushed: lag.phys, IndexFlushed: lag.phys})
	victim := fx.msgs[27]
	fx.patch(t, victim.phys+40, 1, func(b []byte) { b[0] ^= 0x01 })
	_, err = Open(fx.cfg)
	var ce *commitlog.CorruptionError
	if !errors.As(err, &ce) || ce.Offset != victim.phys || !strings.Contains(err.Error(), "fdatasynced before the crash") ||
		!strings.Contains(err.Error(), "--repair-corruption") {
		t.Fatalf("want a refusal naming the damaged durable record at %d: %v", victim.phys, err)
	}
	if names, _ := fx.fs.List("/data/quarantine"); len(names) != 0 {
		t.Fatalf("a refusing open quarantined %v", names)
	}
	fx.cfg.RepairCorruption = true
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	checkAcked(t, s, fx.msgs[:27], "before the damaged record")
	checkAcked(t, s, fx.msgs[28:], "after the damaged record")
	if st := s.IntegrityStats(); st.RecoveryRepaired != 1 || st.UnsyncedTailBytes != 0 {
		t.Fatalf("integrity stats after the repair: %+v", st)
	}
	assertNeverServedBad(t, s, fx.msgs)
}

// After a process kill the log ending inside a record the flushed mark
// covers is durable data missing, past the lagging checkpoint too: the
// offline check reports it and Open refuses, changing nothing.
func TestKillThenMissingDurableTailIsRefused(t *testing.T) {
	fx := newCorruptFixture(t, true)
	f, err := fx.fs.OpenFile("/data/abort", os.O_RDWR|os.O_CREATE, 0o600) // the kill
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	lag := fx.msgs[20]
	writeCheckpoint(fx.fs, "/data", checkpoint{PhysFlushed: lag.phys, CQFlushed: lag.phys, IndexFlushed: lag.phys})
	last := fx.msgs[29]
	fx.truncateAt(t, last.phys+10)
	rep, err := Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	missing := false
	for _, p := range rep.Problems {
		missing = missing || (p.Kind == KindMissingData && strings.Contains(p.Msg, "flushed mark"))
	}
	if !missing {
		t.Fatalf("check did not report the durable tail missing: %+v", rep.Problems)
	}
	var me *commitlog.MissingError
	if _, err := Open(fx.cfg); !errors.As(err, &me) || me.Offset != last.phys {
		t.Fatalf("want a refusal at %d: %v", last.phys, err)
	}
}

// The verified tail reaches into the previous segment when the segment
// holding the checkpointed flushed offset is shorter than verifyTailBytes:
// a record damaged there, after the target, makes Open refuse (issue: only
// the current segment used to be scanned).
func TestVerifiedTailCrossesSegments(t *testing.T) {
	fx := newCorruptFixture(t, true)
	end := fx.msgs[29].phys + int64(fx.sizes[29]) + commitlog.TrailerBytes
	lastSeg := fx.msgs[29].phys - fx.msgs[29].phys%fx.cfg.CommitLogSegmentBytes
	victim := fx.msgs[22]
	if victim.phys >= lastSeg {
		t.Fatalf("fixture: message 22 at %d is not before the last segment %d", victim.phys, lastSeg)
	}
	// A log shorter than the tail is verified whole.
	s := mustOpen(t, fx.cfg)
	if s.recovered.ScannedFrom != 0 || s.recovered.Records != len(fx.msgs) {
		t.Fatalf("default tail: verified %d records from %d; want all %d from 0", s.recovered.Records, s.recovered.ScannedFrom, len(fx.msgs))
	}
	s.Close()

	// The tail starts 2 KiB before the victim: inside the previous segment.
	withVerifyTail(t, end-victim.phys+2<<10)
	s = mustOpen(t, fx.cfg)
	if got := s.recovered.ScannedFrom; got >= victim.phys || got < lastSeg-fx.cfg.CommitLogSegmentBytes {
		t.Fatalf("verified from %d; want a record of the previous segment [%d, %d)", got, lastSeg-fx.cfg.CommitLogSegmentBytes, victim.phys)
	}
	s.Close()

	fx.patch(t, victim.phys+100, 1, func(b []byte) { b[0] ^= 0x08 })
	var ce *commitlog.CorruptionError
	if _, err := Open(fx.cfg); !errors.As(err, &ce) || ce.Offset != victim.phys {
		t.Fatalf("damage %d bytes before the flushed offset, in the previous segment: %v", end-victim.phys, err)
	}
	t.Logf("SUMMARY damage %d bytes before the flushed offset, %d bytes before the last segment: refused (tail %d bytes)",
		end-victim.phys, lastSeg-victim.phys, verifyTailBytes)
}
