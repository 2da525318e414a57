package store

import (
	"bytes"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store/commitlog"
)

// A record isolated before the verified tail, found by a read or by the
// scrubber, is repaired on a single broker by an Open with
// RepairCorruption: a hole record takes its place (the damaged bytes in
// quarantine), it leaves the registry, every other record is kept, and
// Check, which failed before, passes counting the hole and the lost entry.
func TestRepairReachesIsolatedRecords(t *testing.T) {
	for _, c := range []struct {
		name   string
		victim int
		damage func(t *testing.T, fx *corruptFixture, phys int64)
		find   func(t *testing.T, fx *corruptFixture, s *Store)
	}{
		{"found by a read", 2, func(t *testing.T, fx *corruptFixture, phys int64) {
			fx.patch(t, phys+100, 1, func(b []byte) { b[0] ^= 0x08 })
		}, func(t *testing.T, fx *corruptFixture, s *Store) {
			readQueueAll(t, s, fx.msgs)
		}},
		{"found by the scrubber, size damaged", 3, func(t *testing.T, fx *corruptFixture, phys int64) {
			fx.patch(t, phys, 4, func(b []byte) { b[1] ^= 0x7f })
		}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			withVerifyTail(t, fixtureTail) // the damage is where Open does not verify
			fx := newCorruptFixture(t, true)
			victim := fx.msgs[c.victim]
			c.damage(t, fx, victim.phys)
			damaged := fx.segmentBytes(t, victim.phys)[victim.phys%fx.cfg.CommitLogSegmentBytes:][:fx.sizes[c.victim]+commitlog.TrailerBytes]
			damaged = bytes.Clone(damaged)
			cfg := fx.cfg
			d := newScrubDriver(&cfg, 64<<10, time.Second)
			s := mustOpen(t, cfg)
			if c.find != nil {
				c.find(t, fx, s)
			} else {
				d.tickUntil(t, 100, func() bool { return len(s.Isolated()) > 0 })
			}
			if got := s.Isolated(); len(got) != 1 || got[0].PhysOffset != victim.phys {
				t.Fatalf("isolated %v, want the record at %d", got, victim.phys)
			}
			s.Close()
			if rep, err := Check(fx.cfg); err != nil || rep.OK() {
				t.Fatalf("check before the repair: %v, problems %v", err, rep.Problems)
			}

			fx.cfg.RepairCorruption = true
			s = mustOpen(t, fx.cfg)
			if got := s.Isolated(); len(got) != 0 {
				t.Fatalf("registry after the repair: %v", got)
			}
			kept := without(fx.msgs, c.victim)
			checkAcked(t, s, kept, "after the repair")
			if served := readQueueAll(t, s, fx.msgs); len(served) != len(kept) {
				t.Fatalf("served %d of the %d intact messages", len(served), len(kept))
			}
			if len(s.Isolated()) != 0 {
				t.Fatal("a read isolated the repaired record again")
			}
			s.Close()
			rep := checkSound(t, fx.cfg, "after the repair")
			if len(rep.Holes) != 1 || rep.Holes[0].Offset != victim.phys || rep.LostEntries != 1 || rep.Records != int64(len(kept)) {
				t.Fatalf("check after the repair: holes %v, %d lost entries, %d records", rep.Holes, rep.LostEntries, rep.Records)
			}
			names, _ := fx.fs.List("/data/quarantine")
			if len(names) != 1 || !bytes.Equal(readAll(t, fx.fs, "/data/quarantine/"+names[0]), damaged) {
				t.Fatalf("quarantine holds %v, want exactly the damaged entry", names)
			}
			if recs, err := ReadIsolated(fx.cfg); err != nil || len(recs) != 0 {
				t.Fatalf("registry on disk after the repair: %v %v", recs, err)
			}
			fx.cfg.RepairCorruption = false
			s = mustOpen(t, fx.cfg)
			defer s.Close()
			checkAcked(t, s, kept, "reopened without repair")
		})
	}
}

// The repair verifies the segment from its start: a registry record whose
// offset holds no damaged entry (a damaged queue entry pointed into a
// valid record) changes nothing and stays listed.
func TestRepairOfIsolatedLeavesValidRecords(t *testing.T) {
	withVerifyTail(t, fixtureTail)
	fx := newCorruptFixture(t, true)
	s := mustOpen(t, fx.cfg)
	mid := fx.msgs[2].phys + 40 // inside a valid record
	s.isolate(IsolatedRecord{Topic: "T", QueueID: 0, QueueOffset: 2, PhysOffset: mid, Size: int32(fx.sizes[2]), FoundBy: FoundByRead, Reason: "test"})
	s.Close()
	before := bytes.Clone(fx.segmentBytes(t, mid))
	fx.cfg.RepairCorruption = true
	s = mustOpen(t, fx.cfg)
	defer s.Close()
	if got := s.Isolated(); len(got) != 1 || got[0].PhysOffset != mid {
		t.Fatalf("registry %v, want the record at %d kept", got, mid)
	}
	if !bytes.Equal(fx.segmentBytes(t, mid), before) {
		t.Fatal("the repair changed a segment of valid records")
	}
	checkAcked(t, s, fx.msgs, "after the repair")
	if names, _ := fx.fs.List("/data/quarantine"); len(names) != 0 {
		t.Fatalf("quarantine %v", names)
	}
}
