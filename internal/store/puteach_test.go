package store

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// eachPuts builds a DeferredPut per message group, each recording its
// callback (deferredPut) and the flushed offset when it was called.
func eachPuts(s *Store, groups ...[]*message.Message) ([]DeferredPut, []*deferredPut) {
	puts := make([]DeferredPut, len(groups))
	ds := make([]*deferredPut, len(groups))
	for i, ms := range groups {
		d := &deferredPut{done: make(chan struct{})}
		ds[i] = d
		puts[i] = DeferredPut{Msgs: ms, Done: func(r PutResult) {
			d.flushed.Store(s.log.FlushedOffset())
			d.res.Store(&r)
			if d.calls.Add(1) == 1 {
				close(d.done)
			}
		}}
	}
	return puts, ds
}

// The puts of one PutEachDeferred call are queued together and written
// with one append; a put its checks refuse fails alone, at once; every
// other put is answered once, after an fdatasync covered it, with queue
// offsets in the order of the puts.
func TestPutEachDeferredOneAppend(t *testing.T) {
	cfg := testConfig(vfs.NewMem())
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	defer s.Close()
	big := newMsg("T", 0, string(make([]byte, cfg.MaxMessageBytes+1)), nil)
	batch := []*message.Message{newMsg("T", 0, "b1", nil), big} // all or none: refused as a whole
	groups := [][]*message.Message{
		{newMsg("T", 0, "a", nil)},
		{big},
		{newMsg("T", 0, "b", nil), newMsg("T", 0, "c", nil)},
		batch,
		{newMsg("T", 0, "d", nil)},
	}
	puts, ds := eachPuts(s, groups...)

	// With the append lock held, the call queues what it writes and waits:
	// every valid put must be queued at once, for one write to take them.
	s.appendMu.Lock()
	returned := make(chan struct{})
	go func() {
		s.PutEachDeferred(context.Background(), puts)
		close(returned)
	}()
	queued := func() int {
		s.pendMu.Lock()
		defer s.pendMu.Unlock()
		return len(s.pending)
	}
	// A call that queued its puts one by one would wait for the lock after
	// the first, so the count seen once any is queued is final.
	waitUntil(t, "the valid puts to be queued", func() bool { return queued() > 0 })
	if n := queued(); n != 3 {
		s.appendMu.Unlock()
		t.Fatalf("%d puts queued at once, want the 3 valid ones", n)
	}
	s.appendMu.Unlock()
	<-returned

	for _, i := range []int{1, 3} {
		if puts[i].Pending || puts[i].Result.Status != PutMessageIllegal {
			t.Fatalf("put %d (oversized): pending %v, status %v", i, puts[i].Pending, puts[i].Result.Status)
		}
	}
	for gi, i := range []int{0, 2, 4} {
		if !puts[i].Pending {
			t.Fatalf("put %d: answered at once (%v) under SYNC_FLUSH", i, puts[i].Result.Status)
		}
		if r := ds[i].wait(t); r.Status != PutOK {
			t.Fatalf("put %d: %v %v", i, r.Status, r.Err)
		}
		last := groups[i][len(groups[i])-1]
		if end := last.PhysOffset + int64(last.StoredSize()) + commitlog.TrailerBytes; ds[i].flushed.Load() < end {
			t.Fatalf("put %d acknowledged at flushed offset %d, before its end %d", i, ds[i].flushed.Load(), end)
		}
		if w := []int64{0, 1, 3}[gi]; groups[i][0].QueueOffset != w {
			t.Fatalf("put %d: queue offset %d, want %d", i, groups[i][0].QueueOffset, w)
		}
	}
	if groups[2][1].QueueOffset != 2 {
		t.Fatalf("second message of put 2: queue offset %d", groups[2][1].QueueOffset)
	}
	if batch[0].QueueOffset != 0 || batch[0].PhysOffset != 0 {
		t.Fatal("a message of a refused batch got offsets")
	}
	waitVisible(t, s, "T", 0, 4)
	for i, d := range ds {
		if n := d.calls.Load(); (i == 1 || i == 3) && n != 0 || i != 1 && i != 3 && n != 1 {
			t.Fatalf("put %d called back %d times", i, n)
		}
	}
}

// A failed fdatasync fails every pending put of the call; a closed store
// refuses every put at once.
func TestPutEachDeferredFailures(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.NewMem())
	cfg := testConfig(efs)
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	efs.InjectSyncError("commitlog")
	puts, ds := eachPuts(s, []*message.Message{newMsg("T", 0, "x", nil)}, []*message.Message{newMsg("T", 1, "y", nil)})
	s.PutEachDeferred(context.Background(), puts)
	for i, d := range ds {
		if !puts[i].Pending {
			t.Fatalf("put %d not pending: %v", i, puts[i].Result.Status)
		}
		if r := d.wait(t); r.Status != PutServiceNotAvailable {
			t.Fatalf("put %d after a failed fsync: %v %v", i, r.Status, r.Err)
		}
	}
	s.Close()
	puts, _ = eachPuts(s, []*message.Message{newMsg("T", 0, "x", nil)}, []*message.Message{newMsg("T", 1, "y", nil)})
	s.PutEachDeferred(context.Background(), puts)
	for i, p := range puts {
		if p.Pending || p.Result.Status != PutServiceNotAvailable {
			t.Fatalf("closed store, put %d: pending %v, status %v", i, p.Pending, p.Result.Status)
		}
	}
}

// Power loss after PutEachDeferred calls: every put acknowledged survives
// at its queue offset, whatever the crash kept of the rest.
func TestPutEachDeferredPowerLoss(t *testing.T) {
	mem := vfs.NewMem()
	cfg := testConfig(mem)
	cfg.FlushDiskType = SyncFlush
	s := mustOpen(t, cfg)
	type acked struct {
		qid  int32
		qo   int64
		body string
	}
	var got []acked
	var answered atomic.Int32
	total := 0
	for round := 0; round < 20; round++ {
		var groups [][]*message.Message
		for i := 0; i < 1+round%maxEachPuts; i++ {
			groups = append(groups, []*message.Message{newMsg("T", int32(i%3), fmt.Sprintf("r%d-%d", round, i), nil)})
		}
		puts, ds := eachPuts(s, groups...)
		s.PutEachDeferred(context.Background(), puts)
		for i, d := range ds {
			total++
			if !puts[i].Pending {
				t.Fatalf("round %d put %d: %v", round, i, puts[i].Result.Status)
			}
			if r := d.wait(t); r.Status != PutOK {
				t.Fatalf("round %d put %d: %v %v", round, i, r.Status, r.Err)
			}
			answered.Add(1)
			m := groups[i][0]
			got = append(got, acked{m.QueueID, m.QueueOffset, string(m.Body)})
		}
	}
	// The last round is left unanswered-for: written, maybe not flushed.
	var tail [][]*message.Message
	for i := 0; i < 5; i++ {
		tail = append(tail, []*message.Message{newMsg("T", int32(i%3), fmt.Sprintf("tail-%d", i), nil)})
	}
	puts, _ := eachPuts(s, tail...)
	s.PutEachDeferred(context.Background(), puts)
	crashed := mem.CrashClone()
	s.Close()
	cfg.FS = crashed
	s2 := mustOpen(t, cfg)
	defer s2.Close()
	for _, a := range got {
		waitVisible(t, s2, "T", a.qid, a.qo+1)
		r, err := s2.GetMessage("T", a.qid, a.qo, 1, 1<<20, nil)
		if err != nil {
			t.Fatal(err)
		}
		if b := bodies(r); len(b) != 1 || b[0] != a.body {
			t.Fatalf("queue %d offset %d after power loss: %q, acknowledged %q", a.qid, a.qo, b, a.body)
		}
		r.Release()
	}
	if int(answered.Load()) != total {
		t.Fatalf("%d of %d answered", answered.Load(), total)
	}
}
