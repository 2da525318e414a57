package store

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/store/commitlog"
)

func TestCheckHealthyStore(t *testing.T) {
	fx := newCorruptFixture(t, true)
	rep, err := Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || len(rep.Warnings) != 0 || !rep.CleanShutdown {
		t.Fatalf("healthy store: problems %v warnings %v", rep.Problems, rep.Warnings)
	}
	if rep.Records != 30 || rep.QueueEntries != 30 || rep.Queues != 1 || rep.IndexedKeys != 30 || rep.Segments < 2 {
		t.Fatalf("counts: %+v", rep)
	}
	// A running store cannot be checked.
	s := mustOpen(t, fx.cfg)
	if _, err := Check(fx.cfg); err == nil {
		t.Fatal("checked a store in use")
	}
	s.Close()
}

func TestCheckFindsCorruption(t *testing.T) {
	fx := newCorruptFixture(t, true)
	victim := fx.msgs[4]
	fx.patch(t, victim.phys+100, 1, func(b []byte) { b[0] ^= 1 })
	rep, err := Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	seg := commitlog.SegmentName(victim.phys - victim.phys%fx.cfg.CommitLogSegmentBytes)
	found := false
	for _, p := range rep.Problems {
		found = found || (p.Offset == victim.phys && strings.HasSuffix(p.File, seg))
	}
	if !found {
		t.Fatalf("corrupt record at %d in %s not reported: %v", victim.phys, seg, rep.Problems)
	}
	// The queue entry pointing at it is reported too.
	cqReported := false
	for _, p := range rep.Problems {
		cqReported = cqReported || (strings.Contains(p.File, "consumequeue") && p.Offset == victim.qo)
	}
	if !cqReported {
		t.Fatalf("consume queue entry not reported: %v", rep.Problems)
	}
}

func TestCheckFindsBadQueueEntry(t *testing.T) {
	fx := newCorruptFixture(t, true)
	patchQueueFile(t, fx, 5*20, 8, func(b []byte) { // entry 5 points at record 6
		binary.BigEndian.PutUint64(b, uint64(fx.msgs[6].phys))
	})
	rep, _ := Check(fx.cfg)
	if rep.OK() {
		t.Fatal("bad consume queue entry not found")
	}
	for _, p := range rep.Problems {
		t.Log(p)
	}
}

// A queue entry whose tag code is not the hash of its record's tags is
// reported as such (consumers filtering by tag would skip or take it
// wrongly), at its queue offset, and nothing else is.
func TestCheckFindsWrongTagsCode(t *testing.T) {
	fx := newCorruptFixture(t, true)
	patchQueueFile(t, fx, 7*20+12, 8, func(b []byte) { // entry 7's tag code, changed
		binary.BigEndian.PutUint64(b, binary.BigEndian.Uint64(b)+1)
	})
	rep, err := Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) != 1 || rep.Problems[0].Kind != KindTagsCode || rep.Problems[0].Offset != 7 || !strings.HasSuffix(rep.Problems[0].File, "consumequeue/T/0") {
		t.Fatalf("a wrong tag code at queue offset 7: problems %v", rep.Problems)
	}
}

// patchQueueFile changes n bytes at off of the fixture's ConsumeQueue T/0
// in place with fn.
func patchQueueFile(t *testing.T, fx *corruptFixture, off int64, n int, fn func([]byte)) {
	t.Helper()
	f, err := fx.fs.OpenFile("/data/consumequeue/T/0/00000000000000000000", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	fn(b)
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestCheckDoesNotModify(t *testing.T) {
	fx := newCorruptFixture(t, false)
	last := fx.msgs[29]
	fx.truncateAt(t, last.phys+10)
	seg := "/data/commitlog/" + commitlog.SegmentName(last.phys-last.phys%fx.cfg.CommitLogSegmentBytes)
	before, _ := fx.fs.Stat(seg)
	rep, err := Check(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := fx.fs.Stat(seg)
	if before.Size() != after.Size() {
		t.Fatal("check changed the segment")
	}
	torn := false
	for _, w := range rep.Warnings {
		torn = torn || (w.Offset == last.phys && strings.Contains(w.Msg, "torn tail"))
	}
	if !torn || rep.CleanShutdown {
		t.Fatalf("torn tail after a crash not reported as a warning: %+v", rep)
	}
}
