package transaction

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// newMemEnv is an env on the crash-simulating filesystem.
func newMemEnv(t *testing.T, async bool) (*env, *vfs.MemFS) {
	mem := vfs.NewMem()
	e := &env{t: t, dir: "/keel", fs: mem, clk: newFakeClock(), prods: newProducers(t), async: async}
	e.open()
	t.Cleanup(e.close)
	return e, mem
}

// powerLoss captures what a power loss would leave of the files, abandons
// the running engine and store, and opens new ones on the captured files.
func (e *env) powerLoss(mem *vfs.MemFS) *vfs.MemFS {
	e.t.Helper()
	clone := mem.CrashClone()
	e.eng.Close()
	e.st.Close() // on the abandoned filesystem
	e.eng, e.st = nil, nil
	e.fs = clone
	e.open()
	return clone
}

// halfIndex maps every half record of the store to its transaction id and
// every op record's halves to true.
func (e *env) decidedHalves() map[int64]bool {
	out := map[int64]bool{}
	for _, op := range e.records(OpTopic, 0) {
		for _, h := range parseOpBody(op.Body) {
			out[h] = true
		}
	}
	return out
}

// TestPowerLossDuringCommits crashes (strict power-loss semantics) while
// many transactions are being prepared and decided concurrently, then lets
// the producers answer again (as check-backs would). Every acknowledged
// prepare survives; every transaction ends decided once: committed ones
// stored exactly once on the real topic, rolled-back ones never.
func TestPowerLossDuringCommits(t *testing.T) {
	for round := 0; round < 3; round++ {
		t.Run(strconv.Itoa(round), func(t *testing.T) {
			e, mem := newMemEnv(t, false)
			rng := rand.New(rand.NewPCG(uint64(round), 7))
			const n = 300
			type tx struct {
				m      *message.Message
				commit bool
			}
			var mu sync.Mutex
			var acked []tx
			// crashing is set just before the power loss: a prepare that returned
			// before it was set returned before the crash, so it is durable.
			var crashing atomic.Bool
			var wg sync.WaitGroup
			eng := e.eng
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < n && !crashing.Load(); i += 8 {
						m, ok := tryPrepare(eng, "Orders", "pg", strconv.Itoa(i))
						if !ok || crashing.Load() {
							return
						}
						x := tx{m, i%3 != 0}
						mu.Lock()
						acked = append(acked, x)
						mu.Unlock()
						d := decisionRollback
						if x.commit {
							d = decisionCommit
						}
						eng.End(context.Background(), endTxn("pg", m.QueueOffset, m.PhysOffset, d))
					}
				}()
			}
			// Crash once a random number of prepares went through; fail
			// instead of hanging if the prepares stop short of it.
			target := int64(50 + rng.IntN(150))
			deadline := time.Now().Add(10 * time.Second)
			for e.eng.Stats().Prepared < target {
				if time.Now().After(deadline) {
					crashing.Store(true)
					wg.Wait()
					t.Fatalf("only %d of %d prepares before the crash point", e.eng.Stats().Prepared, target)
				}
				time.Sleep(time.Millisecond)
			}
			crashing.Store(true)
			e.powerLoss(mem)
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%d prepares acknowledged before the crash; %d undecided after it", len(acked), e.eng.Stats().Pending)
			// the producers answer again (check-backs) for every acknowledged prepare
			for _, x := range acked {
				d := decisionRollback
				if x.commit {
					d = decisionCommit
				}
				if c := e.end(x.m, "pg", d); c != 0 {
					t.Fatalf("END for acknowledged prepare %s after the crash: code %d", x.m.Body, c)
				}
			}
			// halves whose prepare was in flight at the crash (durable, never
			// acknowledged): their producer has no local record and rolls back
			rolledBack := map[string]bool{}
			for _, p := range e.eng.List("", "", 0).Pending {
				rec, err := e.st.LookMessageByOffset(p.CommitLogOffset)
				if err != nil {
					t.Fatal(err)
				}
				rolledBack[string(message.View(rec).Body())] = true
				if c := e.endAt("pg", p.HalfOffset, p.CommitLogOffset, decisionRollback); c != 0 {
					t.Fatalf("rollback of an unacknowledged prepare: %d", c)
				}
			}
			if s := e.eng.Stats(); s.Pending != 0 {
				t.Fatalf("undecided after every answer: %+v", s)
			}
			count := map[string]int{}
			for _, m := range e.records("Orders", 0) {
				count[string(m.Body)]++
			}
			for b := range rolledBack {
				if count[b] != 0 {
					t.Fatalf("unacknowledged prepare %s stored", b)
				}
			}
			for _, x := range acked {
				want := 0
				if x.commit {
					want = 1
				}
				if count[string(x.m.Body)] != want {
					t.Fatalf("transaction %s (commit %v) stored %d times", x.m.Body, x.commit, count[string(x.m.Body)])
				}
			}
		})
	}
}

// TestCursorNeverAheadOfDurableOps: under ASYNC_FLUSH, decisions are
// acknowledged before they are durable. The cursor file must never claim a
// half decided whose op record a power loss can still take away: after a
// power loss at any point, every half record left is either named by an op
// record left, or undecided in the engine.
func TestCursorNeverAheadOfDurableOps(t *testing.T) {
	for round := 0; round < 4; round++ {
		e, mem := newMemEnv(t, true)
		var ms []*message.Message
		for i := 0; i < 40; i++ {
			ms = append(ms, e.prepare("Orders", "pg", strconv.Itoa(i)))
		}
		// the halves are durable; the decisions below may not be
		waitFor(t, "flush", func() bool { s := e.st.Stats(); return s.FlushedOffset >= s.WrittenOffset })
		for i, m := range ms {
			if i != len(ms)-1 { // all decided but the newest: the cursor wants to move far
				e.end(m, "pg", []int{decisionCommit, decisionRollback}[i%2])
			}
			if i%10 == round {
				e.eng.CheckOnce(context.Background()) // persists whatever is safe
			}
		}
		e.eng.CheckOnce(context.Background())
		e.powerLoss(mem)
		decided := e.decidedHalves()
		pending := map[int64]bool{}
		for _, p := range e.eng.List("", "", 0).Pending {
			pending[p.HalfOffset] = true
		}
		c, err := loadCursors(e.fs, e.dir)
		if err != nil {
			t.Fatal(err)
		}
		halves := e.records(HalfTopic, 0)
		if len(halves) != len(ms) {
			t.Fatalf("round %d: %d of %d flushed halves survived", round, len(halves), len(ms))
		}
		for _, h := range halves {
			if !decided[h.QueueOffset] && !pending[h.QueueOffset] {
				t.Fatalf("round %d: half %d neither decided by a surviving op nor pending (cursor %+v)", round, h.QueueOffset, c)
			}
		}
		e.close()
	}
}

// tryPrepare is prepare that reports a failed put instead of failing.
func tryPrepare(eng *Engine, topic, group, body string) (*message.Message, bool) {
	uniq := "7F000001" + strconv.FormatInt(seq.Add(1)+1<<40, 16)
	props := message.EncodeProperties(map[string]string{message.PropUniqKey: uniq, message.PropProducerGroup: group,
		message.PropTransactionPrepared: "true"})
	m := &message.Message{Topic: topic, SysFlag: message.FlagTxPrepared, BornTimestamp: 1,
		BornHost: storeHost, StoreHost: storeHost, Body: []byte(body), Properties: props}
	res := eng.Prepare(context.Background(), m)
	return m, res.Status == store.PutOK
}
