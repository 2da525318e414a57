package store

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// corruptFixture is a store with 30 messages in several segments, closed.
type corruptFixture struct {
	fs    *vfs.MemFS
	cfg   Config
	msgs  []ackedMsg
	sizes []int
}

func newCorruptFixture(t *testing.T, clean bool) *corruptFixture {
	fx := &corruptFixture{fs: vfs.NewMem()}
	fx.cfg = testConfig(fx.fs)
	fx.cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, fx.cfg)
	for i := range 30 {
		m := newMsg("T", 0, fmt.Sprintf("%02d-%s", i, strings.Repeat("b", 5000)), map[string]string{"KEYS": fmt.Sprint("k", i)})
		put(t, s, m)
		fx.msgs = append(fx.msgs, ackedMsg{m.Topic, m.QueueID, m.QueueOffset, m.PhysOffset, m.Body})
		fx.sizes = append(fx.sizes, m.StoredSize())
	}
	waitVisible(t, s, "T", 0, 30)
	if clean {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return fx
	}
	// A crash: the checkpoint is whatever was last written.
	crashed := fx.fs.CrashClone()
	s.Close()
	fx.fs = crashed
	fx.cfg.FS = crashed
	return fx
}

// patch applies fn to the n bytes at CommitLog offset off.
func (fx *corruptFixture) patch(t *testing.T, off int64, n int, fn func([]byte)) {
	t.Helper()
	seg := off - off%fx.cfg.CommitLogSegmentBytes
	path := "/data/commitlog/" + commitlog.SegmentName(seg)
	f, err := fx.fs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	f.ReadAt(b, off-seg)
	fn(b)
	f.WriteAt(b, off-seg)
	f.Sync()
}

func (fx *corruptFixture) truncateAt(t *testing.T, off int64) {
	t.Helper()
	seg := off - off%fx.cfg.CommitLogSegmentBytes
	f, err := fx.fs.OpenFile("/data/commitlog/"+commitlog.SegmentName(seg), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(off - seg)
	f.Sync()
	f.Close()
}

// fieldOffsets are positions inside a record to damage.
func fieldOffsets(size int) map[string]int {
	return map[string]int{"header": 13, "body": 100, "properties": size - 3}
}

func TestTornTailAfterCrashIsCut(t *testing.T) {
	fx := newCorruptFixture(t, false)
	last := fx.msgs[29]
	fx.truncateAt(t, last.phys+50)
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	checkAcked(t, s, fx.msgs[:29], "after cut")
	if s.MaxOffset("T", 0) != 29 {
		t.Fatalf("max offset %d: the entry of the cut record survived", s.MaxOffset("T", 0))
	}
	checkConsistent(t, s, "after cut")
}

func TestDamagedLastRecord(t *testing.T) {
	for name, pos := range fieldOffsets(5000) {
		t.Run(name, func(t *testing.T) {
			// After a crash, with the checkpoint before the record, the
			// damaged last record is a torn tail: cut.
			fx := newCorruptFixture(t, false)
			last := fx.msgs[29]
			fx.cfg.FS = fx.fs
			if cp, err := readCheckpoint(fx.fs, "/data"); err == nil && cp.PhysFlushed > last.phys {
				writeCheckpoint(fx.fs, "/data", checkpoint{PhysFlushed: last.phys, CQFlushed: last.phys, IndexFlushed: last.phys})
			}
			fx.patch(t, last.phys+int64(pos), 1, func(b []byte) { b[0] ^= 0x40 })
			s := mustOpen(t, fx.cfg)
			checkAcked(t, s, fx.msgs[:29], name)
			if s.MaxOffset("T", 0) != 29 {
				t.Fatalf("damaged record still referenced")
			}
			s.Close()

			// After a clean shutdown the same damage is below the
			// checkpointed flushed offset: durable data is missing.
			fx = newCorruptFixture(t, true)
			fx.patch(t, fx.msgs[29].phys+int64(pos), 1, func(b []byte) { b[0] ^= 0x40 })
			_, err := Open(fx.cfg)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "checkpointed flushed offset") {
				t.Fatalf("clean shutdown, damaged last record: %v", err)
			}
		})
	}
}

func TestDamagedMiddleRecordRefusesToOpen(t *testing.T) {
	for name, pos := range fieldOffsets(5000) {
		t.Run(name, func(t *testing.T) {
			fx := newCorruptFixture(t, false)
			// The checkpoint may cover the victim; force a full scan. With
			// neither a checkpoint nor a flushed mark nothing is known
			// durable after this power loss, so no invalid entry followed
			// by valid ones can be taken for an unsynced tail.
			fx.fs.Remove("/data/checkpoint")
			fx.fs.Remove("/data/commitlog/" + commitlog.MarkName)
			victim := fx.msgs[len(fx.msgs)-3]
			fx.patch(t, victim.phys+int64(pos), 1, func(b []byte) { b[0] ^= 0x01 })
			_, err := Open(fx.cfg)
			var ce *commitlog.CorruptionError
			if !errors.As(err, &ce) || ce.Offset != victim.phys || !strings.Contains(err.Error(), commitlog.SegmentName(victim.phys-victim.phys%fx.cfg.CommitLogSegmentBytes)) {
				t.Fatalf("want refusal naming offset %d: %v", victim.phys, err)
			}
			if !strings.Contains(err.Error(), "--repair-corruption") || !strings.Contains(err.Error(), "docs/operations.md") {
				t.Fatalf("error does not say how to repair: %v", err)
			}
			// Repair: everything else stays readable, the bad record is skipped.
			fx.cfg.RepairCorruption = true
			s := mustOpen(t, fx.cfg)
			defer s.Close()
			names, _ := fx.fs.List("/data/quarantine")
			if len(names) != 1 {
				t.Fatalf("quarantine: %v", names)
			}
			assertNeverServedBad(t, s, fx.msgs)
		})
	}
}

// assertNeverServedBad reads the whole queue: every message served is one
// of the acknowledged ones, intact; skipped ones are reported as removed.
func assertNeverServedBad(t *testing.T, s *Store, acked []ackedMsg) {
	t.Helper()
	byOffset := map[int64]ackedMsg{}
	for _, a := range acked {
		byOffset[a.qo] = a
	}
	served := 0
	for off := int64(0); off < s.MaxOffset("T", 0); {
		r, err := s.GetMessage("T", 0, off, 32, 1<<20, nil)
		if err != nil {
			t.Fatalf("read at %d: %v", off, err)
		}
		for _, rec := range r.Records {
			v := message.View(rec)
			a := byOffset[v.QueueOffset()]
			if string(v.Body()) != string(a.body) {
				t.Fatalf("served a bad record at offset %d", v.QueueOffset())
			}
			served++
		}
		if r.NextOffset <= off {
			t.Fatalf("no progress at %d: %v", off, r.Status)
		}
		off = r.NextOffset
		r.Release()
	}
	if served == 0 || served == len(acked) {
		t.Fatalf("served %d of %d", served, len(acked))
	}
}

func TestZeroedPageInTheMiddle(t *testing.T) {
	fx := newCorruptFixture(t, true)
	victim := fx.msgs[3]
	fx.fs.Remove("/data/checkpoint")
	page := victim.phys - victim.phys%4096
	fx.patch(t, page, 4096, func(b []byte) { clear(b) })
	_, err := Open(fx.cfg)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("zeroed page: %v", err)
	}
	fx.cfg.RepairCorruption = true
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	assertNeverServedBad(t, s, fx.msgs)
	checkAcked(t, s, fx.msgs[len(fx.msgs)-5:], "later segments")
}

// A record damaged where recovery does not look (an old segment after a
// clean shutdown) is caught on read and never served; the batch goes on
// after it (isolation, isolate_test.go).
func TestDamageFoundOnRead(t *testing.T) {
	withVerifyTail(t, fixtureTail)
	fx := newCorruptFixture(t, true)
	victim := fx.msgs[1]
	fx.patch(t, victim.phys+100, 1, func(b []byte) { b[0] ^= 0x08 })
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	r, err := s.GetMessage("T", 0, 0, 32, 1<<20, nil)
	if err != nil || len(r.Records) != 29 || r.NextOffset != 30 {
		t.Fatalf("batch over the bad record: %d records, next %d, %v", len(r.Records), r.NextOffset, err)
	}
	for _, rec := range r.Records {
		if message.View(rec).QueueOffset() == 1 {
			t.Fatal("served the bad record")
		}
	}
	r.Release()
	if _, err := s.LookMessageByOffset(victim.phys); !errors.Is(err, commitlog.ErrCorrupt) {
		t.Fatalf("look at the bad record: %v", err)
	}
	if offs, _ := s.QueryByKey("T", "k1", 10, 0, 1<<62); len(offs) != 0 {
		t.Fatalf("query returned the bad record: %v", offs)
	}
	if s.Stats().CorruptReads == 0 {
		t.Fatal("corrupt reads not counted")
	}
	r, err = s.GetMessage("T", 0, 2, 32, 1<<20, nil)
	if err != nil || r.Status != Found {
		t.Fatalf("after the bad record: %v", err)
	}
}

// After a crash, an invalid entry past the checkpointed flushed offset in the
// last segment is an unsynced tail written back out of order: the log is cut
// there (the bytes go to quarantine) even though valid entries follow.
func TestUnsyncedTailWrittenBackOutOfOrderIsCut(t *testing.T) {
	fx := newCorruptFixture(t, false)
	victim := fx.msgs[len(fx.msgs)-3]
	writeCheckpoint(fx.fs, "/data", checkpoint{PhysFlushed: victim.phys})
	fx.patch(t, victim.phys+40, 1, func(b []byte) { b[0] ^= 0x01 })
	s := mustOpen(t, fx.cfg)
	defer s.Close()
	kept := fx.msgs[:len(fx.msgs)-3]
	checkAcked(t, s, kept, "unsynced tail")
	if got := s.MaxOffset("T", 0); got != int64(len(kept)) {
		t.Fatalf("max offset %d after the cut, want %d", got, len(kept))
	}
	names, _ := fx.fs.List("/data/quarantine")
	if len(names) != 1 {
		t.Fatalf("the cut bytes must be kept in quarantine: %v", names)
	}
	assertNeverServedBad(t, s, fx.msgs)

	// The same damage below the checkpointed flushed offset is corruption
	// of durable data: refuse.
	fx = newCorruptFixture(t, false)
	victim = fx.msgs[len(fx.msgs)-3]
	end := fx.msgs[len(fx.msgs)-1].phys + 1
	writeCheckpoint(fx.fs, "/data", checkpoint{PhysFlushed: end})
	fx.patch(t, victim.phys+40, 1, func(b []byte) { b[0] ^= 0x01 })
	var ce *commitlog.CorruptionError
	if _, err := Open(fx.cfg); !errors.As(err, &ce) || ce.Offset != victim.phys {
		t.Fatalf("damage below the flushed offset must refuse to open: %v", err)
	}
}
