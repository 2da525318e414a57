package store

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

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

// TestPutRecordsDeferredDiskFullMidBatch: a batch whose CommitLog write
// runs out of space in the middle of its records (a short write, then
// ENOSPC) is refused whole with DISK_FULL, at once: no record of it is
// readable, its queue offsets are given back, done is never called, and
// the store stays writable: the next batch takes the same queue offsets,
// and after a power loss the log holds the records before and after it
// only.
func TestPutRecordsDeferredDiskFullMidBatch(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	cfg := noSpaceConfig(efs)
	cfg.PrefillBytes = -1 // the one injected short write must be the batch's, not a prefill write's
	s := mustOpen(t, cfg)
	defer func() { s.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // bounds every wait
	defer cancel()
	batch := func(tag byte, n int) [][]byte {
		var recs [][]byte
		for i := range n {
			rec, err := record.AppendEnvelope(nil, record.AMQP, 1, []record.Dest{{Topic: "A", QueueID: 0}},
				[]byte{tag, byte('0' + i), 'x', 'x', 'x', 'x', 'x', 'x'})
			if err != nil {
				t.Fatal(err)
			}
			recs = append(recs, rec)
		}
		return recs
	}
	putOK := func(recs [][]byte) []int64 {
		t.Helper()
		phys := make([]int64, len(recs))
		done := make(chan PutResult, 1)
		if res, pending := s.PutRecordsDeferred(ctx, recs, phys, func(r PutResult) { done <- r }); !pending {
			t.Fatalf("not pending: %+v", res)
		}
		select {
		case r := <-done:
			if r.Status != PutOK {
				t.Fatalf("done: %+v", r)
			}
		case <-ctx.Done():
			t.Fatal("no done for a batch")
		}
		if err := s.WaitFor(ctx, Visible, phys[len(phys)-1]+1, 0); err != nil {
			t.Fatal(err)
		}
		return phys
	}
	putOK(batch('a', 2))

	full := batch('b', 5)
	size := 0
	for _, r := range full {
		size += len(r)
	}
	// The write reaches the file up to the middle of the third record.
	efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "commitlog", Times: 1, Err: syscall.ENOSPC, ShortWrite: 2*len(full[0]) + len(full[2])/2})
	written := s.Offset(Written)
	phys := make([]int64, len(full))
	res, pending := s.PutRecordsDeferred(context.Background(), full, phys, func(PutResult) { t.Error("done called for a batch the full disk refused") })
	if pending || res.Status != PutDiskFull || !errors.Is(res.Err, ErrNoSpace) {
		t.Fatalf("batch on a full disk: %+v pending %v", res, pending)
	}
	if efs.Injected(vfs.OpWrite) != 1 {
		t.Fatalf("the short write was not the batch's (%d injected)", efs.Injected(vfs.OpWrite))
	}
	for i, p := range phys {
		if p != -1 {
			t.Fatalf("record %d of the refused batch has CommitLog offset %d", i, p)
		}
	}
	if got := s.Offset(Written); got != written {
		t.Fatalf("the log's written end moved from %d to %d for a refused batch", written, got)
	}
	if got := s.MaxOffset("A", 0); got != 2 {
		t.Fatalf("after the refused batch the queue ends at %d, want 2", got)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the store failed on a full disk: %v", err)
	}

	after := putOK(batch('c', 3))
	check := func(s *Store, what string) {
		t.Helper()
		if err := s.WaitFor(ctx, Visible, after[2]+1, 0); err != nil {
			t.Fatal(err)
		}
		r, err := s.GetMessage("A", 0, 0, 20, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Release()
		var got []string
		for _, rec := range r.Records {
			got = append(got, string(record.Envelope(rec).Body()[:2]))
		}
		if strings.Join(got, ",") != "a0,a1,c0,c1,c2" {
			t.Fatalf("%s: the queue holds %v, want a0, a1, c0, c1, c2", what, got)
		}
	}
	check(s, "after space returned")
	cfg.FS = mem.CrashClone()
	s.Close()
	s = mustOpen(t, cfg)
	check(s, "after a power loss")
}
