package store

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// TestPutRecordDeferred: under SYNC_FLUSH the records are appended in call
// order at once and each done comes with PutOK once Confirmed passed it;
// a refused record is answered at once and done is never called.
func TestPutRecordDeferred(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	type ack struct {
		i               int
		r               PutResult
		phys, confirmed int64
	}
	acks := make(chan ack, 3)
	var physs []int64
	for i := range 3 {
		rec, err := record.AppendEnvelope(nil, record.AMQP, 1, []record.Dest{{Topic: "A", QueueID: 0}}, []byte{byte(i)})
		if err != nil {
			t.Fatal(err)
		}
		res, phys, pending := s.PutRecordDeferred(context.Background(), rec, func(r PutResult, phys int64) {
			acks <- ack{i, r, phys, s.Offset(Confirmed)}
		})
		if !pending || phys < 0 || (len(physs) > 0 && phys <= physs[len(physs)-1]) {
			t.Fatalf("put %d: %+v phys %d pending %v", i, res, phys, pending)
		}
		physs = append(physs, phys)
	}
	for range 3 {
		a := <-acks
		if a.r.Status != PutOK || a.phys != physs[a.i] || a.confirmed <= physs[a.i] {
			t.Fatalf("done %d: %+v at %d with Confirmed at %d, the record at %d", a.i, a.r, a.phys, a.confirmed, physs[a.i])
		}
	}
	if res, phys, pending := s.PutRecordDeferred(context.Background(), []byte{1, 2}, func(PutResult, int64) { t.Error("done called for a refused record") }); res.Status != PutMessageIllegal || phys != -1 || pending {
		t.Fatalf("garbage: %+v %d %v", res, phys, pending)
	}
}

// TestPutRecordsDeferred: several records put with one call are one
// append, at consecutive queue offsets in call order; done comes once,
// with PutOK after Confirmed passed the last, and they survive a crash
// after it. A batch holding a record the store refuses is refused whole,
// at once, with nothing written and done never called.
func TestPutRecordsDeferred(t *testing.T) {
	mem := vfs.NewMem()
	cfg := testConfig(mem)
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer func() { s.Close() }()
	var recs [][]byte
	for i := range 3 {
		rec, err := record.AppendEnvelope(nil, record.AMQP, 1, []record.Dest{{Topic: "A", QueueID: 0}}, []byte{'m', byte('0' + i)})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec)
	}
	puts := s.Stats().Puts
	phys := make([]int64, len(recs))
	dones := make(chan int64, 2)
	res, pending := s.PutRecordsDeferred(context.Background(), recs, phys, func(r PutResult) {
		if r.Status != PutOK {
			t.Errorf("done: %+v", r)
		}
		dones <- s.Offset(Confirmed)
	})
	if !pending {
		t.Fatalf("not pending: %+v", res)
	}
	if confirmed := <-dones; confirmed <= phys[2] {
		t.Fatalf("done with Confirmed at %d, the last record at %d", confirmed, phys[2])
	}
	if got := s.Stats().Puts - puts; got != 1 {
		t.Fatalf("%d appends for one batch", got)
	}
	check := func(s *Store, what string) {
		t.Helper()
		if err := s.WaitFor(context.Background(), Visible, phys[2]+1, 0); err != nil {
			t.Fatal(err)
		}
		r, err := s.GetMessage("A", 0, 0, 10, 1<<20, nil)
		if err != nil || len(r.Records) != 3 {
			t.Fatalf("%s: %v, %d records", what, err, len(r.Records))
		}
		defer r.Release()
		for i, rec := range r.Records {
			e := record.Envelope(rec)
			var qo int64
			e.EachDest(func(_ int, _ []byte, _ int32, o, _ int64, _ int) error { qo = o; return nil })
			if string(e.Body()) != string([]byte{'m', byte('0' + i)}) || qo != int64(i) || e.PhysOffset() != phys[i] {
				t.Fatalf("%s: record %d: body %q at queue offset %d, CommitLog %d (put at %d)", what, i, e.Body(), qo, e.PhysOffset(), phys[i])
			}
		}
	}
	check(s, "after done")
	cfg.FS = mem.CrashClone() // what an fdatasync covered, the store still open
	s.Close()
	s = mustOpen(t, cfg)
	check(s, "after a crash")

	bad := [][]byte{recs[0], {1, 2, 3}, recs[1]}
	phys = make([]int64, len(bad))
	res, pending = s.PutRecordsDeferred(context.Background(), bad, phys, func(PutResult) { t.Error("done called for a refused batch") })
	if pending || res.Status != PutMessageIllegal || phys[0] != -1 || phys[2] != -1 {
		t.Fatalf("batch with garbage: %+v pending %v phys %v", res, pending, phys)
	}
	if got := s.MaxOffset("A", 0); got != 3 {
		t.Fatalf("after the refused batch the queue ends at %d, want 3", got)
	}
}
