package store

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/vfs"
)

// ackedMsg is a message the store acknowledged.
type ackedMsg struct {
	topic string
	qid   int32
	qo    int64
	phys  int64
	body  []byte
}

func longRun() bool { return os.Getenv("KEEL_LONG") == "1" }

// checkAcked asserts every acknowledged message is readable and intact.
func checkAcked(t testing.TB, s *Store, acked []ackedMsg, what string) {
	t.Helper()
	for _, a := range acked {
		r, err := s.GetMessage(a.topic, a.qid, a.qo, 1, 1<<20, nil)
		if err != nil {
			t.Fatalf("%s: acked %s/%d@%d: %v", what, a.topic, a.qid, a.qo, err)
		}
		if r.Status != Found || len(r.Records) != 1 {
			t.Fatalf("%s: acked %s/%d@%d: status %v (min %d max %d)", what, a.topic, a.qid, a.qo, r.Status, r.MinOffset, r.MaxOffset)
		}
		v := message.View(r.Records[0])
		if !bytes.Equal(v.Body(), a.body) || v.PhysOffset() != a.phys {
			t.Fatalf("%s: acked %s/%d@%d: body or phys offset differ", what, a.topic, a.qid, a.qo)
		}
		r.Release()
	}
}

// checkConsistent reads every queue from min to max (every record verified
// on the way) and checks the CommitLog has exactly the records the queues
// point at.
func checkConsistent(t testing.TB, s *Store, what string) {
	t.Helper()
	seen := map[int64]bool{}
	for _, ref := range s.allQueues() {
		for off := ref.q.MinOffset(); off < ref.q.MaxOffset(); {
			r, err := s.GetMessage(ref.topic, ref.id, off, 32, 1<<20, nil)
			if err != nil || r.Status != Found {
				t.Fatalf("%s: read %s/%d@%d: %v %v", what, ref.topic, ref.id, off, r, err)
			}
			for i, rec := range r.Records {
				v := message.View(rec)
				if v.QueueOffset() != off+int64(i) {
					t.Fatalf("%s: %s/%d: record %d has queue offset %d", what, ref.topic, ref.id, off+int64(i), v.QueueOffset())
				}
				seen[v.PhysOffset()] = true
			}
			off = r.NextOffset
			r.Release()
		}
	}
	rd := s.log.NewReader(s.log.MinOffset())
	n := 0
	for {
		_, phys, err := rd.Next(s.log.WrittenOffset())
		if err != nil {
			if err.Error() == "EOF" {
				break
			}
			t.Fatalf("%s: CommitLog does not read back: %v", what, err)
		}
		if !seen[phys] {
			t.Fatalf("%s: record at %d has no ConsumeQueue entry", what, phys)
		}
		n++
	}
	if n != len(seen) {
		t.Fatalf("%s: %d records in the CommitLog, %d referenced", what, n, len(seen))
	}
}

type ackLog struct {
	mu    sync.Mutex
	acked []ackedMsg
}

func (a *ackLog) add(m ackedMsg) { a.mu.Lock(); a.acked = append(a.acked, m); a.mu.Unlock() }
func (a *ackLog) snapshot() []ackedMsg {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]ackedMsg(nil), a.acked...)
}
func (a *ackLog) len() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.acked) }

// runWriters starts n goroutines putting random messages until ctx ends.
func runWriters(ctx context.Context, s *Store, n int, seed uint64, acks *ackLog) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for i := 0; ctx.Err() == nil; i++ {
				body := fmt.Sprintf("w%d-%d-%s", w, i, strings.Repeat("x", rng.IntN(2000)))
				m := newMsg(fmt.Sprintf("T%d", rng.IntN(3)), int32(rng.IntN(4)), body, map[string]string{"KEYS": fmt.Sprintf("k%d-%d", w, i)})
				var r PutResult
				if rng.IntN(4) == 0 {
					m2 := newMsg(m.Topic, m.QueueID, body+"-b", nil)
					r = s.PutMessages(ctx, []*message.Message{m, m2})
					if r.Status == PutOK {
						acks.add(ackedMsg{m2.Topic, m2.QueueID, m2.QueueOffset, m2.PhysOffset, m2.Body})
					}
				} else {
					r = s.PutMessage(ctx, m)
				}
				if r.Status == PutOK {
					acks.add(ackedMsg{m.Topic, m.QueueID, m.QueueOffset, m.PhysOffset, m.Body})
				} else if ctx.Err() == nil && r.Status != PutServiceNotAvailable {
					panic(fmt.Sprintf("put: %v %v", r.Status, r.Err))
				}
			}
		}()
	}
	return &wg
}

// TestPowerLoss: writers put with SYNC_FLUSH; the filesystem loses power at
// a random moment; the reopened store must hold every message acknowledged
// before the power loss, intact, and nothing inconsistent.
func TestPowerLoss(t *testing.T) {
	rounds := 200
	if longRun() {
		rounds = 2000
	}
	if testing.Short() {
		rounds = 20
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for round := range rounds {
		powerLossRound(t, seed, round, crashKind(round%2), SyncFlush)
		if t.Failed() {
			t.Fatalf("failed with seed %d round %d", seed, round)
		}
	}
}

// TestPowerLossAsync: under ASYNC_FLUSH the messages covered by a completed
// flush survive, and the store reopens consistent (queue entries of lost
// messages are dropped).
func TestPowerLossAsync(t *testing.T) {
	rounds := 50
	if longRun() {
		rounds = 500
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for round := range rounds {
		powerLossRound(t, seed, round, crashKind(round%2), AsyncFlush)
		if t.Failed() {
			t.Fatalf("failed with seed %d round %d", seed, round)
		}
	}
}

// TestPowerLossWriteBack: as TestPowerLoss and TestPowerLossAsync, with a
// power loss after the page cache wrote back any subset of the unsynced
// pages, in no order (vfs.MemFS.CrashCloneWriteBack): the store starts,
// keeps every acknowledged message (under ASYNC_FLUSH, every flushed
// one), and cuts the tail past the flushed mark as unsynced when it is
// written back out of order.
func TestPowerLossWriteBack(t *testing.T) {
	rounds := 60
	if longRun() {
		rounds = 600
	}
	if testing.Short() {
		rounds = 10
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("KEEL_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d", seed)
	cut, acked := 0, 0
	for round := range rounds {
		mode := SyncFlush
		if round%3 == 2 {
			mode = AsyncFlush
		}
		r := powerLossRound(t, seed, round, writeBackCrash, mode)
		if r.unsyncedCut {
			cut++
		}
		acked += r.acked
		if t.Failed() {
			t.Fatalf("failed with seed %d round %d", seed, round)
		}
	}
	t.Logf("%d power losses, %d with an unsynced tail written back out of order (cut), %d acknowledged (ASYNC_FLUSH: flushed) messages checked, lost 0", rounds, cut, acked)
}

// crashKind is how a power loss round's filesystem loses power.
type crashKind int

const (
	strictCrash    crashKind = iota // only what an fdatasync covered survives
	tornCrash                       // plus a random prefix of the unsynced writes
	writeBackCrash                  // plus any subset of the unsynced pages
)

func (k crashKind) String() string { return [...]string{"strict", "torn", "write-back"}[k] }

// roundResult is what one power loss round saw.
type roundResult struct {
	acked       int  // acknowledged messages checked (ASYNC_FLUSH: those a flush covered)
	unsyncedCut bool // recovery cut an unsynced tail written back out of order
}

// powerLossRound runs one power loss.
func powerLossRound(t *testing.T, seed uint64, round int, kind crashKind, mode FlushDiskType) roundResult {
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	what := fmt.Sprintf("seed %d round %d crash=%v %v", seed, round, kind, mode)
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.FlushDiskType = mode
	cfg.FlushInterval = time.Duration(1+rng.IntN(3)) * time.Millisecond
	cfg.CommitLogSegmentBytes = 48 << 10
	cfg.MaxMessageBytes = 4 << 10
	cfg.FlushConsumeQueueInterval = time.Duration(1+rng.IntN(5)) * time.Millisecond
	var before []ackedMsg
	// A previous life with a clean close, sometimes.
	if rng.IntN(3) == 0 {
		s := mustOpen(t, cfg)
		acks := &ackLog{}
		ctx, cancel := context.WithCancel(context.Background())
		wg := runWriters(ctx, s, 4, seed+1, acks)
		waitAcks(acks, rng.IntN(40))
		cancel()
		wg.Wait()
		if err := s.Close(); err != nil {
			t.Fatalf("%s: close: %v", what, err)
		}
		before = acks.snapshot()
	}
	s := mustOpen(t, cfg)
	acks := &ackLog{}
	ctx, cancel := context.WithCancel(context.Background())
	wg := runWriters(ctx, s, 8, seed+uint64(round), acks)
	waitAcks(acks, rng.IntN(120))
	flushed := s.log.FlushedOffset()
	acked := acks.snapshot()
	if mode == AsyncFlush {
		acked = slices.DeleteFunc(acked, func(a ackedMsg) bool { return a.phys >= flushed })
	}
	var crashed *vfs.MemFS
	switch kind {
	case tornCrash:
		crashed = fs.CrashCloneWith(rng)
	case writeBackCrash:
		crashed = fs.CrashCloneWriteBack(rng)
	default:
		crashed = fs.CrashClone()
	}
	cancel()
	wg.Wait()
	s.Close()

	cfg.FS = crashed
	if rep, err := Check(cfg); err != nil || !rep.OK() {
		m, _ := commitlog.ReadMark(crashed, "/data/commitlog")
		cp, _ := readCheckpoint(crashed, "/data")
		t.Fatalf("%s: check after power loss: %v %v (mark %+v checkpoint %+v flushed before %d)", what, err, rep.Problems, m, cp, flushed)
	}
	s2, err := Open(cfg)
	if err != nil {
		t.Fatalf("%s: reopen: %v", what, err)
	}
	defer s2.Close()
	checkAcked(t, s2, before, what+" (earlier life)")
	checkAcked(t, s2, acked, what)
	if round < 5 {
		t.Logf("%s: %d acked, recovered written %d confirmed %d", what, len(acked), s2.log.WrittenOffset(), s2.VisibleOffset())
	}
	checkConsistent(t, s2, what)
	// The store keeps working after recovery.
	put(t, s2, newMsg("T0", 0, "after", nil))
	return roundResult{acked: len(acked) + len(before), unsyncedCut: s2.IntegrityStats().UnsyncedTailBytes > 0}
}

func waitAcks(acks *ackLog, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for acks.len() < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
	}
}
