package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

// noSpaceConfig is testConfig under SYNC_FLUSH with the disk watermarks out
// of the way, so that writes really run into ENOSPC.
func noSpaceConfig(fs vfs.FS) Config {
	cfg := testConfig(fs)
	cfg.FlushDiskType = SyncFlush
	cfg.DiskHardLimitRatio, cfg.DiskMaxUsedSpaceRatio = 100, 100
	cfg.FlushConsumeQueueInterval = 10 * time.Millisecond
	return cfg
}

// waitUntil polls cond until it holds or 10 s passed.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkDense checks that the acknowledged offsets of each queue are exactly
// 0..n-1 and that the queue holds n entries: nothing was lost, nothing
// unacknowledged was stored, no offset was skipped.
func checkDense(t *testing.T, s *Store, acked []ackedMsg, what string) {
	t.Helper()
	byQ := map[int32][]int64{}
	for _, a := range acked {
		byQ[a.qid] = append(byQ[a.qid], a.qo)
	}
	for qid, offs := range byQ {
		slices.Sort(offs)
		for i, off := range offs {
			if off != int64(i) {
				t.Fatalf("%s: queue %d: acknowledged offsets %v are not dense", what, qid, offs)
			}
		}
		if got := s.MaxOffset("T", qid); got != int64(len(offs)) {
			t.Fatalf("%s: queue %d: max offset %d, %d acknowledged", what, qid, got, len(offs))
		}
	}
}

// reopenAfterPowerLoss closes s and opens the durable state of mem.
func reopenAfterPowerLoss(t *testing.T, s *Store, mem *vfs.MemFS, cfg Config) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("close after the disk-full period: %v", err)
	}
	cfg.FS = mem.CrashClone()
	return mustOpen(t, cfg)
}

// Fill the disk, fail, free space, succeed: the failed puts say DISK_FULL,
// reads keep working, the store never turns read-only, and afterwards every
// acknowledged message is intact at a dense queue offset.
func TestNoSpaceFillFailFreeSucceed(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	cfg := noSpaceConfig(efs)
	s := mustOpen(t, cfg)
	var acked []ackedMsg
	n := 0
	try := func() PutResult {
		n++
		body := fmt.Sprintf("m%04d-%s", n, strings.Repeat("x", 400))
		m := newMsg("T", int32(n%2), body, map[string]string{"KEYS": fmt.Sprintf("k%d", n)})
		r := s.PutMessage(context.Background(), m)
		if r.OK() {
			acked = append(acked, ackedMsg{"T", m.QueueID, m.QueueOffset, m.PhysOffset, []byte(body)})
		}
		return r
	}
	for range 10 {
		if r := try(); !r.OK() {
			t.Fatalf("put: %v %v", r.Status, r.Err)
		}
	}
	waitVisible(t, s, "T", 0, 5)

	efs.SetFreeBytes(8 << 10) // room for a few more records
	failed := 0
	for i := 0; failed < 20; i++ {
		if i > 1000 {
			t.Fatal("the disk never filled up")
		}
		r := try()
		if r.OK() {
			continue
		}
		failed++
		if r.Status != PutDiskFull || !errors.Is(r.Err, ErrNoSpace) || !errors.Is(r.Err, syscall.ENOSPC) {
			t.Fatalf("put on a full disk: %v %v, want DISK_FULL wrapping ErrNoSpace and ENOSPC", r.Status, r.Err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the store turned read-only on ENOSPC: %v", err)
	}
	r, err := s.GetMessage("T", 0, 0, 32, 1<<20, nil)
	if err != nil || r.Status != Found || len(r.Records) < 5 {
		t.Fatalf("reads while the disk is full: %v %v", r, err)
	}
	r.Release()

	efs.SetFreeBytes(-1)
	for range 10 {
		if r := try(); !r.OK() {
			t.Fatalf("put after space returned: %v %v", r.Status, r.Err)
		}
	}
	perQueue := map[int32]int64{}
	for _, a := range acked {
		perQueue[a.qid]++
	}
	for qid, n := range perQueue { // acknowledged (flushed); dispatch follows
		waitVisible(t, s, "T", qid, n)
	}
	waitUntil(t, "dispatch and persist to resume", func() bool {
		return !s.dispatchStalled.Load() && !s.progressStalled.Load()
	})
	checkDense(t, s, acked, "after the disk-full period")
	checkAcked(t, s, acked, "after the disk-full period")
	t.Logf("acked %d, refused %d, ENOSPC errors %d", len(acked), failed, efs.NoSpaceErrors())

	s = reopenAfterPowerLoss(t, s, mem, cfg)
	defer s.Close()
	checkAcked(t, s, acked, "after a power loss")
	checkDense(t, s, acked, "after a power loss")
	checkConsistent(t, s, "after a power loss")
	last := acked[len(acked)-1]
	if offs, err := s.QueryByKey("T", fmt.Sprintf("k%d", n), 4, 0, 1<<62); err != nil || len(offs) != 1 || offs[0] != last.phys {
		t.Fatalf("key of the last message: %v %v", offs, err)
	}
}

// Concurrent writers (combined batches) through a disk-full period: the
// queue offsets handed back by failed batches are reused, so every queue
// holds exactly the acknowledged messages at offsets 0..n-1.
func TestNoSpaceConcurrentWritersKeepQueuesDense(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	cfg := noSpaceConfig(efs)
	s := mustOpen(t, cfg)

	var (
		mu      sync.Mutex
		acked   []ackedMsg
		refused int
		bad     error
		stop    = make(chan struct{})
		halt    sync.Once
		wg      sync.WaitGroup
	)
	stopWriters := func() { halt.Do(func() { close(stop) }); wg.Wait() }
	defer stopWriters() // also when a check below fails the test
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := fmt.Sprintf("w%d-%d-%s", w, i, strings.Repeat("y", 200))
				ms := newMsg("T", int32((w+i)%3), body, nil)
				r := s.PutMessage(context.Background(), ms)
				mu.Lock()
				switch {
				case r.OK():
					acked = append(acked, ackedMsg{"T", ms.QueueID, ms.QueueOffset, ms.PhysOffset, []byte(body)})
				case r.Status == PutDiskFull && errors.Is(r.Err, ErrNoSpace):
					refused++
				default:
					bad = fmt.Errorf("put: %v %v", r.Status, r.Err)
				}
				mu.Unlock()
			}
		}()
	}
	counts := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		if bad != nil {
			t.Fatal(bad)
		}
		return len(acked), refused
	}
	waitUntil(t, "acknowledged sends", func() bool { a, _ := counts(); return a >= 100 })
	efs.SetFreeBytes(0)
	waitUntil(t, "sends refused for lack of space", func() bool { _, r := counts(); return r >= 100 })
	a0, _ := counts()
	efs.SetFreeBytes(-1)
	waitUntil(t, "sends to resume", func() bool { a, _ := counts(); return a >= a0+100 })
	stopWriters()
	if bad != nil {
		t.Fatal(bad)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("the store turned read-only: %v", err)
	}
	if err := s.log.Flush(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "everything dispatched", func() bool { return s.VisibleOffset() == s.log.WrittenOffset() })
	checkDense(t, s, acked, "after the disk-full period")
	t.Logf("acked %d, refused %d, ENOSPC errors %d", len(acked), refused, efs.NoSpaceErrors())

	s = reopenAfterPowerLoss(t, s, mem, cfg)
	defer s.Close()
	checkAcked(t, s, acked, "after a power loss")
	checkDense(t, s, acked, "after a power loss")
	checkConsistent(t, s, "after a power loss")
}

// ENOSPC on ConsumeQueue, index or checkpoint writes stalls dispatching or
// persisting (retried every round) instead of failing the store: sends are
// acknowledged (the CommitLog has room), readers see what was dispatched,
// and everything catches up once the writes work again. A failed fsync, even
// with ENOSPC, still makes the store read-only.
func TestNoSpaceInDerivedFilesIsRetried(t *testing.T) {
	for _, c := range []struct {
		name   string
		rule   vfs.Rule
		sticky bool
	}{
		{"consumequeue write", vfs.Rule{Ops: vfs.OpWrite, Path: "/consumequeue/", Err: syscall.ENOSPC}, false},
		{"consumequeue short write", vfs.Rule{Ops: vfs.OpWrite, Path: "/consumequeue/", Err: syscall.ENOSPC, ShortWrite: 30}, false},
		{"index write", vfs.Rule{Ops: vfs.OpWrite, Path: "/index/", Err: syscall.ENOSPC}, false},
		{"checkpoint write", vfs.Rule{Ops: vfs.OpWrite, Path: "checkpoint", Err: syscall.ENOSPC}, false},
		{"consumequeue fsync", vfs.Rule{Ops: vfs.OpSync, Path: "/consumequeue/", Err: syscall.ENOSPC}, true},
		{"index fsync", vfs.Rule{Ops: vfs.OpSync, Path: "/index/", Err: syscall.ENOSPC}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := vfs.NewMem()
			efs := vfs.NewErrorFS(mem)
			cfg := noSpaceConfig(efs)
			s := mustOpen(t, cfg)
			var acked []ackedMsg
			send := func(i int) bool {
				body := fmt.Sprintf("b%d", i)
				m := newMsg("T", 0, body, map[string]string{"KEYS": fmt.Sprintf("k%d", i)})
				r := s.PutMessage(context.Background(), m)
				if !r.OK() {
					if c.sticky && errors.Is(r.Err, ErrReadOnly) {
						return false // the failed fsync came first
					}
					t.Fatalf("put %d: %v %v", i, r.Status, r.Err)
				}
				acked = append(acked, ackedMsg{"T", 0, m.QueueOffset, m.PhysOffset, []byte(body)})
				return true
			}
			for i := range 5 {
				send(i)
			}
			waitVisible(t, s, "T", 0, 5)
			if err := s.persistProgress(); err != nil {
				t.Fatal(err)
			}
			efs.Inject(c.rule)
			// 300 records: past a ConsumeQueue segment (100 entries) and
			// an index write-behind batch (128 entries), both of which
			// write while dispatching.
			for i := 5; i < 300 && send(i); i++ {
			}
			waitUntil(t, "the fault to be hit", func() bool { return efs.Injected(vfs.OpAll) > 0 })
			if c.sticky {
				waitUntil(t, "the store to turn read-only", func() bool { return s.Err() != nil })
				if r := s.PutMessage(context.Background(), newMsg("T", 0, "after", nil)); r.Status != PutServiceNotAvailable {
					t.Fatalf("put after a failed fsync: %v", r.Status)
				}
				s.Close()
				return
			}
			waitUntil(t, "retries", func() bool { return efs.Injected(vfs.OpAll) >= 3 })
			if err := s.Err(); err != nil {
				t.Fatalf("read-only after %s: %v", c.name, err)
			}
			if !s.Stats().WriteStalled {
				t.Fatal("Stats().WriteStalled is false while the disk is full")
			}
			r, err := s.GetMessage("T", 0, 0, 32, 1<<20, nil)
			if err != nil || r.Status != Found || len(r.Records) < 5 {
				t.Fatalf("reads during the fault: %v %v", r, err)
			}
			r.Release()

			efs.ClearRules()
			waitVisible(t, s, "T", 0, int64(len(acked)))
			waitUntil(t, "dispatch and persist to resume", func() bool { return !s.Stats().WriteStalled })
			if err := s.persistProgress(); err != nil {
				t.Fatalf("persist after the fault: %v", err)
			}
			cp, err := readCheckpoint(mem, "/data")
			if err != nil || cp.CQFlushed != s.log.WrittenOffset() {
				t.Fatalf("checkpoint %+v (%v), want CQ flushed up to %d", cp, err, s.log.WrittenOffset())
			}
			checkDense(t, s, acked, c.name)
			s = reopenAfterPowerLoss(t, s, mem, cfg)
			defer s.Close()
			checkAcked(t, s, acked, c.name)
			checkConsistent(t, s, c.name)
			for _, i := range []int{0, 150, 299} {
				if offs, err := s.QueryByKey("T", fmt.Sprintf("k%d", i), 4, 0, 1<<62); err != nil || len(offs) != 1 || offs[0] != acked[i].phys {
					t.Fatalf("key k%d: %v %v", i, offs, err)
				}
			}
		})
	}
}

// TestNoSpaceGivesBackEveryEntryOfARecord: a record with one entry per
// message that the full disk refuses gives back all its n queue offsets,
// so the next one written after space returns takes the same first
// offset and the queue stays dense.
func TestNoSpaceGivesBackEveryEntryOfARecord(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	cfg := noSpaceConfig(efs)
	// No prefill: a write into a segment already zero-filled needs no new
	// space and succeeds on a full disk (as on a real filesystem), and the
	// prefiller may or may not have reached the next record's bytes.
	cfg.PrefillBytes = -1
	s := mustOpen(t, cfg)
	defer s.Close()
	put := func() (PutResult, int64) {
		rec, err := record.AppendEnvelopeFlags(nil, record.KafkaBatch, record.FlagEntryPerMessage, 4,
			[]record.Dest{{Topic: "K", QueueID: 0}}, []byte(strings.Repeat("b", 1000)))
		if err != nil {
			t.Fatal(err)
		}
		first := int64(-1)
		r, _, _ := s.AppendRecordPatched(context.Background(), rec, func(_ []byte, _ int, qo, _ int64) { first = qo })
		return r, first
	}
	if r, first := put(); !r.OK() || first != 0 {
		t.Fatalf("first record: %v %v at %d", r.Status, r.Err, first)
	}
	efs.SetFreeBytes(1)
	for range 3 {
		if r, _ := put(); r.OK() {
			t.Fatal("a record was written on a full disk")
		}
	}
	efs.SetFreeBytes(-1)
	r, first := put()
	if !r.OK() || first != 4 {
		t.Fatalf("after space returned: %v %v, first entry %d, want 4", r.Status, r.Err, first)
	}
	waitVisible(t, s, "K", 0, 8)
	if got := s.MaxOffset("K", 0); got != 8 {
		t.Fatalf("max offset %d, want 8", got)
	}
}
