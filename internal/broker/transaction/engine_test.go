package transaction

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

func TestPrepareStoresInvisibleHalf(t *testing.T) {
	e := newEnv(t, nil)
	m := e.prepare("Orders", "pg", "b1", message.PropCheckImmunitySeconds, "30")
	if got := e.records("Orders", 0); len(got) != 0 {
		t.Fatalf("half message visible on its real topic: %d records", len(got))
	}
	hs := e.records(HalfTopic, 0)
	if len(hs) != 1 {
		t.Fatalf("half queue has %d records, want 1", len(hs))
	}
	h := hs[0]
	if h.QueueOffset != m.QueueOffset || h.PhysOffset != m.PhysOffset {
		t.Fatalf("Prepare reported %d/%d, stored %d/%d", m.QueueOffset, m.PhysOffset, h.QueueOffset, h.PhysOffset)
	}
	if h.SysFlag&message.FlagTxMask != 0 {
		t.Fatalf("half sysFlag %#x keeps txn bits", h.SysFlag)
	}
	for k, want := range map[string]string{message.PropRealTopic: "Orders", message.PropRealQueueID: "0",
		message.PropTransactionID: prop(h, message.PropUniqKey), message.PropProducerGroup: "pg"} {
		if got := prop(h, k); got != want || want == "" {
			t.Fatalf("half property %s = %q, want %q", k, got, want)
		}
	}
	l := e.eng.List("", "", 0)
	if l.Total != 1 || l.Pending[0].Topic != "Orders" || l.Pending[0].ProducerGroup != "pg" || l.Pending[0].Checks != 0 {
		t.Fatalf("List = %+v", l)
	}
	if l := e.eng.List("Other", "", 0); l.Total != 0 {
		t.Fatalf("List(Other) = %+v", l)
	}
}

func TestPrepareNeedsGroup(t *testing.T) {
	e := newEnv(t, nil)
	m := &message.Message{Topic: "T", Properties: message.EncodeProperties(map[string]string{message.PropUniqKey: "U1"}),
		StoreHost: storeHost, BornHost: storeHost}
	if res := e.eng.Prepare(context.Background(), m); res.OK() {
		t.Fatal("prepared message without PGROUP accepted")
	}
}

func TestCommitDeliversOnce(t *testing.T) {
	e := newEnv(t, nil)
	m := e.prepare("Orders", "pg", "pay-1")
	if c := e.end(m, "pg", decisionCommit); c != 0 {
		t.Fatalf("commit: code %d", c)
	}
	got := e.records("Orders", 0)
	if len(got) != 1 {
		t.Fatalf("%d delivered, want 1", len(got))
	}
	f := got[0]
	if string(f.Body) != "pay-1" || f.SysFlag&message.FlagTxMask != message.FlagTxCommit || f.PreparedTxOffset != m.PhysOffset {
		t.Fatalf("final message body %q sysFlag %#x preparedTx %d (half %d)", f.Body, f.SysFlag, f.PreparedTxOffset, m.PhysOffset)
	}
	for _, k := range []string{message.PropRealTopic, message.PropRealQueueID, message.PropTransactionPrepared} {
		if _, ok := message.Property(f.Properties, k); ok {
			t.Fatalf("final message keeps %s", k)
		}
	}
	if prop(f, message.PropUniqKey) != prop(m, message.PropUniqKey) || prop(f, message.PropTags) != "tagA" {
		t.Fatalf("final message properties %q", f.Properties)
	}
	offs, err := e.st.QueryByKey("Orders", prop(m, message.PropUniqKey), 10, 0, 1<<62)
	if err != nil || len(offs) != 1 {
		t.Fatalf("query by UNIQ_KEY: %v %v", offs, err)
	}
	for i := 0; i < 3; i++ { // duplicate ENDs, both decisions
		if c := e.end(m, "pg", []int{decisionCommit, decisionRollback}[i%2]); c != 0 {
			t.Fatalf("duplicate END: code %d", c)
		}
	}
	if got := e.records("Orders", 0); len(got) != 1 {
		t.Fatalf("%d delivered after duplicate ENDs, want 1", len(got))
	}
	s := e.eng.Stats()
	if s.Committed != 1 || s.DuplicateEnds != 3 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
	ops := e.records(OpTopic, 0)
	if len(ops) != 1 || string(ops[0].Body) != strconv.FormatInt(m.QueueOffset, 10) ||
		prop(ops[0], message.PropTags) != "d" || prop(ops[0], PropOpKind) != OpCommit {
		t.Fatalf("op records %+v", ops)
	}
}

func TestRollbackNeverDelivers(t *testing.T) {
	e := newEnv(t, nil)
	m := e.prepare("Orders", "pg", "x")
	if c := e.end(m, "pg", decisionRollback); c != 0 {
		t.Fatalf("rollback: code %d", c)
	}
	if c := e.end(m, "pg", decisionCommit); c != 0 {
		t.Fatalf("commit after rollback: code %d", c)
	}
	if got := e.records("Orders", 0); len(got) != 0 {
		t.Fatalf("rolled back message delivered")
	}
	if s := e.eng.Stats(); s.RolledBack != 1 || s.Committed != 0 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestEndValidation(t *testing.T) {
	e := newEnv(t, nil)
	m := e.prepare("Orders", "pg", "x")
	if c := e.endAt("other", m.QueueOffset, m.PhysOffset, decisionCommit); c != remoting.ResSystemError {
		t.Fatalf("wrong group: code %d", c)
	}
	if c := e.endAt("pg", m.QueueOffset+1, m.PhysOffset, decisionCommit); c != remoting.ResSystemError {
		t.Fatalf("wrong tranStateTableOffset: code %d", c)
	}
	if c := e.endAt("pg", m.QueueOffset, m.PhysOffset+1, decisionCommit); c != remoting.ResSystemError {
		t.Fatalf("wrong commitLogOffset: code %d", c)
	}
	// (an illegal commitOrRollback, and UNKNOWN's silence, are the
	// broker's: internal/broker TestEndTransactionRequest)
	// an op record is not a half message
	e.end(m, "pg", decisionRollback)
	op := e.records(OpTopic, 0)[0]
	if c := e.endAt("pg", op.QueueOffset, op.PhysOffset, decisionCommit); c != remoting.ResSystemError {
		t.Fatalf("END on an op record: code %d", c)
	}
	if got := e.records("Orders", 0); len(got) != 0 {
		t.Fatal("delivered after invalid ENDs")
	}
}

func TestCheckBackThenCommit(t *testing.T) {
	e := newEnv(t, nil)
	ck := e.prods.connect(t, "pg")
	m := e.prepare("Orders", "pg", "c1")
	if rr := e.eng.CheckOnce(context.Background()); rr.Due != 0 {
		t.Fatalf("checked before the timeout: %+v", rr)
	}
	ck.none(t)
	e.clk.Advance(6 * time.Second)
	if rr := e.eng.CheckOnce(context.Background()); rr.Checked != 1 {
		t.Fatalf("round %+v, want one check", rr)
	}
	chk := ck.next(t)
	qoff, phys := chk.Half.QueueOffset, chk.Half.PhysOffset
	if qoff == m.QueueOffset || phys == m.PhysOffset {
		t.Fatalf("check carries the old offsets %d/%d", qoff, phys)
	}
	if chk.ID != prop(m, message.PropUniqKey) || prop(chk.Half, message.PropUniqKey) != prop(m, message.PropUniqKey) {
		t.Fatalf("check id %q, half's UNIQ_KEY %q", chk.ID, prop(chk.Half, message.PropUniqKey))
	}
	body := chk.Half
	if body.Topic != "Orders" || body.QueueID != 0 || prop(body, message.PropProducerGroup) != "pg" ||
		body.QueueOffset != qoff || body.PhysOffset != phys || prop(body, message.PropTransactionCheckTimes) != "1" {
		t.Fatalf("check body %+v", body)
	}
	if l := e.eng.List("", "", 0); l.Total != 1 || l.Pending[0].Checks != 1 || l.Pending[0].HalfOffset != qoff {
		t.Fatalf("List after re-put %+v", l)
	}
	if c := e.endAt("pg", qoff, phys, decisionCommit); c != 0 {
		t.Fatalf("commit from check: %d", c)
	}
	// the producer's first END arrives late: already decided
	if c := e.end(m, "pg", decisionCommit); c != 0 {
		t.Fatalf("late END: %d", c)
	}
	if got := e.records("Orders", 0); len(got) != 1 || got[0].PreparedTxOffset != phys {
		t.Fatalf("delivered %d (want 1 from the re-put half)", len(got))
	}
	e.clk.Advance(time.Hour)
	if rr := e.eng.CheckOnce(context.Background()); rr.Due != 0 {
		t.Fatalf("decided transaction checked again: %+v", rr)
	}
}

func TestLateFirstEndDecidesRePutHalf(t *testing.T) {
	e := newEnv(t, nil)
	e.prods.connect(t, "pg")
	m := e.prepare("Orders", "pg", "late")
	e.clk.Advance(7 * time.Second)
	e.eng.CheckOnce(context.Background())
	// the answer to the first END (old offsets) arrives after the re-put
	if c := e.end(m, "pg", decisionCommit); c != 0 {
		t.Fatalf("late END: %d", c)
	}
	if got := e.records("Orders", 0); len(got) != 1 {
		t.Fatalf("delivered %d, want 1", len(got))
	}
	if s := e.eng.Stats(); s.Pending != 0 {
		t.Fatalf("pending after decision: %+v", s)
	}
}

func TestCheckImmunityDelaysFirstCheck(t *testing.T) {
	e := newEnv(t, nil)
	e.prods.connect(t, "pg")
	e.prepare("Orders", "pg", "imm", message.PropCheckImmunitySeconds, "20")
	e.clk.Advance(10 * time.Second)
	if rr := e.eng.CheckOnce(context.Background()); rr.Due != 0 {
		t.Fatalf("checked inside the immunity time: %+v", rr)
	}
	e.clk.Advance(10 * time.Second)
	if rr := e.eng.CheckOnce(context.Background()); rr.Checked != 1 {
		t.Fatalf("round %+v", rr)
	}
	// later checks use the plain timeout
	e.clk.Advance(6 * time.Second)
	if rr := e.eng.CheckOnce(context.Background()); rr.Checked != 1 {
		t.Fatalf("second round %+v", rr)
	}
}

func TestCheckLimitDiscards(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.CheckMax = 2 })
	ck := e.prods.connect(t, "pg")
	m := e.prepare("Orders", "pg", "unknown")
	for i := 1; i <= 2; i++ {
		e.clk.Advance(6 * time.Second)
		if rr := e.eng.CheckOnce(context.Background()); rr.Checked != 1 {
			t.Fatalf("round %d: %+v", i, rr)
		}
		chk := ck.next(t)
		qoff, phys := chk.Half.QueueOffset, chk.Half.PhysOffset
		if c := e.endAt("pg", qoff, phys, decisionNone); c != -1 {
			t.Fatalf("unknown answered %d", c)
		}
	}
	e.clk.Advance(6 * time.Second)
	if rr := e.eng.CheckOnce(context.Background()); rr.Discarded != 1 {
		t.Fatalf("round %+v, want a discard", rr)
	}
	ck.none(t)
	if got := e.records("Orders", 0); len(got) != 0 {
		t.Fatal("discarded transaction delivered")
	}
	kept := e.records(CheckMaxTopic, 0)
	if len(kept) != 1 || string(kept[0].Body) != "unknown" || prop(kept[0], message.PropUniqKey) != prop(m, message.PropUniqKey) {
		t.Fatalf("%s holds %d records", CheckMaxTopic, len(kept))
	}
	if s := e.eng.Stats(); s.Discarded != 1 || s.Pending != 0 || s.Checks != 2 {
		t.Fatalf("stats %+v", s)
	}
	if c := e.end(m, "pg", decisionCommit); c != 0 { // too late: decided
		t.Fatalf("END after discard: %d", c)
	}
	if got := e.records("Orders", 0); len(got) != 0 {
		t.Fatal("discarded transaction committed late")
	}
}

func TestNoProducerWaits(t *testing.T) {
	e := newEnv(t, nil)
	e.prepare("Orders", "pg", "w")
	e.clk.Advance(time.Minute)
	for i := 0; i < 3; i++ {
		if rr := e.eng.CheckOnce(context.Background()); rr.NoProducer != 1 {
			t.Fatalf("round %+v", rr)
		}
	}
	if l := e.eng.List("", "pg", 0); l.Total != 1 || l.Pending[0].Checks != 0 {
		t.Fatalf("check count moved without a producer: %+v", l)
	}
	ck := e.prods.connect(t, "pg")
	if rr := e.eng.CheckOnce(context.Background()); rr.Checked != 1 {
		t.Fatalf("round %+v", rr)
	}
	ck.next(t)
}

func TestCheckReachesAnotherMember(t *testing.T) {
	e := newEnv(t, nil)
	a := e.prods.connect(t, "pg")
	b := e.prods.connect(t, "pg") // most recent: gets the first check
	e.prepare("Orders", "pg", "m")
	e.clk.Advance(6 * time.Second)
	e.eng.CheckOnce(context.Background())
	b.next(t)
	b.cl.Close() // disconnects without answering
	waitFor(t, "connection drop", func() bool { return e.prods.ProducerConn("pg") != b.cl.Conn() && e.prods.count("pg") == 1 })
	e.clk.Advance(6 * time.Second)
	if rr := e.eng.CheckOnce(context.Background()); rr.Checked != 1 {
		t.Fatalf("round %+v", rr)
	}
	chk := a.next(t)
	qoff, phys := chk.Half.QueueOffset, chk.Half.PhysOffset
	if c := e.endAt("pg", qoff, phys, decisionCommit); c != 0 {
		t.Fatal(c)
	}
	if got := e.records("Orders", 0); len(got) != 1 {
		t.Fatalf("delivered %d", len(got))
	}
}

func TestRestartKeepsPending(t *testing.T) {
	e := newEnv(t, nil)
	e.prods.connect(t, "pg")
	a := e.prepare("Orders", "pg", "a")
	b := e.prepare("Orders", "pg", "b")
	c := e.prepare("Orders", "pg", "c")
	e.end(a, "pg", decisionCommit)
	e.clk.Advance(6 * time.Second)
	e.eng.CheckOnce(context.Background()) // b and c re-put with count 1
	e.restart()
	l := e.eng.List("", "", 0)
	if l.Total != 2 || l.Pending[0].Checks != 1 || l.Pending[1].Checks != 1 {
		t.Fatalf("after restart: %+v", l)
	}
	// the first ENDs (old offsets) still decide them
	e.end(b, "pg", decisionCommit)
	e.end(c, "pg", decisionRollback)
	e.end(a, "pg", decisionCommit)
	got := e.records("Orders", 0)
	if len(got) != 2 || string(got[0].Body) != "a" || string(got[1].Body) != "b" {
		t.Fatalf("delivered %d", len(got))
	}
	e.restart()
	if s := e.eng.Stats(); s.Pending != 0 {
		t.Fatalf("pending after second restart: %+v", s)
	}
}

// A crash after the final message was stored but before the op record:
// after recovery the half is undecided, and committing it again must not
// deliver a second copy.
func TestCrashBetweenFinalAndOp(t *testing.T) {
	e := newEnv(t, nil)
	m := e.prepare("Orders", "pg", "once")
	e.waitConfirmed()
	rec, err := e.st.LookMessageByOffset(m.PhysOffset)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := message.Decode(rec)
	final, err := finalMessage(h)
	if err != nil {
		t.Fatal(err)
	}
	if res := e.st.PutMessage(context.Background(), final); !res.OK() {
		t.Fatal(res.Err)
	}
	e.abandon()
	e.open()
	if l := e.eng.List("", "", 0); l.Total != 1 {
		t.Fatalf("pending after crash: %+v", l)
	}
	if c := e.end(m, "pg", decisionCommit); c != 0 {
		t.Fatal(c)
	}
	if got := e.records("Orders", 0); len(got) != 1 {
		t.Fatalf("delivered %d copies, want 1", len(got))
	}
	if s := e.eng.Stats(); s.AlreadyCommitted != 1 || s.Committed != 0 || s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// A crash after a check-back re-put but before its recheck record leaves
// two live halves of one transaction: one check, one commit.
func TestCrashBetweenRePutAndOp(t *testing.T) {
	e := newEnv(t, nil)
	ck := e.prods.connect(t, "pg")
	m := e.prepare("Orders", "pg", "dup")
	e.waitConfirmed()
	rec, _ := e.st.LookMessageByOffset(m.PhysOffset)
	h, _ := message.Decode(rec)
	c := *h
	c.Properties = message.SetProperty(h.Properties, message.PropTransactionCheckTimes, "1")
	if res := e.st.PutMessage(context.Background(), &c); !res.OK() {
		t.Fatal(res.Err)
	}
	e.abandon()
	e.open()
	if l := e.eng.List("", "", 0); l.Total != 2 || l.Pending[0].TransactionID != l.Pending[1].TransactionID {
		t.Fatalf("pending %+v", l)
	}
	e.clk.Advance(6 * time.Second)
	if rr := e.eng.CheckOnce(context.Background()); rr.Checked != 1 || rr.Due != 1 {
		t.Fatalf("round %+v", rr)
	}
	chk := ck.next(t)
	ck.none(t)
	if n := chk.Half; prop(n, message.PropTransactionCheckTimes) != "2" {
		t.Fatalf("check count %q, want 2", prop(n, message.PropTransactionCheckTimes))
	}
	qoff, phys := chk.Half.QueueOffset, chk.Half.PhysOffset
	e.endAt("pg", qoff, phys, decisionCommit)
	e.end(m, "pg", decisionCommit)
	if got := e.records("Orders", 0); len(got) != 1 {
		t.Fatalf("delivered %d", len(got))
	}
	if s := e.eng.Stats(); s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCursorFileBoundsRecovery(t *testing.T) {
	e := newEnv(t, nil)
	var ms []*message.Message
	for i := 0; i < 50; i++ {
		ms = append(ms, e.prepare("Orders", "pg", strconv.Itoa(i)))
	}
	for i := 0; i < 40; i++ { // decide the first 40, out of order
		e.end(ms[39-i], "pg", []int{decisionCommit, decisionRollback}[i%2])
	}
	e.eng.CheckOnce(context.Background())
	c, err := loadCursors(e.fs, e.dir)
	if err != nil {
		t.Fatal(err)
	}
	if c.half != ms[40].QueueOffset || c.op != 40 {
		t.Fatalf("cursors %+v, want half %d op 40", c, ms[40].QueueOffset)
	}
	e.restart()
	if l := e.eng.List("", "", 0); l.Total != 10 || l.Pending[0].HalfOffset != ms[40].QueueOffset {
		t.Fatalf("after restart %+v", l)
	}
	e.end(ms[45], "pg", decisionCommit)
	e.end(ms[3], "pg", decisionCommit) // decided before the cursor: nothing
	if got := e.records("Orders", 0); len(got) != 21 {
		t.Fatalf("delivered %d, want 21", len(got))
	}
}

func TestBadStateFile(t *testing.T) {
	e := newEnv(t, nil)
	e.close()
	if err := saveCursors(e.fs, e.dir, cursors{half: 1}); err != nil {
		t.Fatal(err)
	}
	f, _ := e.fs.OpenFile(statePath(e.dir), 2, 0)
	f.WriteAt([]byte("{garbage"), 0)
	f.Close()
	st, err := openStoreOnly(e)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := New(Config{Store: st, Producers: e.prods, Dir: e.dir}); err == nil {
		t.Fatal("garbage state file accepted")
	}
}

func TestConcurrentEndsAndChecks(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.CheckMax = 100 })
	ck := e.prods.connect(t, "pg")
	const n = 200
	ms := make([]*message.Message, n)
	for i := range ms {
		ms[i] = e.prepare("Orders", "pg", strconv.Itoa(i))
	}
	e.clk.Advance(6 * time.Second)
	var wg sync.WaitGroup
	for i, m := range ms {
		for k := 0; k < 3; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := decisionCommit
				if i%3 == 0 {
					d = decisionRollback
				}
				e.end(m, "pg", d)
			}()
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); e.eng.CheckOnce(context.Background()) }()
	wg.Wait()
	// answer the checks that raced with the ENDs (all already decided)
	for len(ck.checks) > 0 {
		chk := <-ck.checks
		qoff, phys := chk.Half.QueueOffset, chk.Half.PhysOffset
		e.endAt("pg", qoff, phys, decisionCommit)
	}
	got := e.records("Orders", 0)
	seen := map[string]bool{}
	for _, m := range got {
		i, _ := strconv.Atoi(string(m.Body))
		if i%3 == 0 || seen[string(m.Body)] {
			t.Fatalf("message %s delivered wrongly (dup %v)", m.Body, seen[string(m.Body)])
		}
		seen[string(m.Body)] = true
	}
	if len(got) != n-(n+2)/3 {
		t.Fatalf("delivered %d, want %d", len(got), n-(n+2)/3)
	}
	if s := e.eng.Stats(); s.Pending != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRunChecksOnTimer(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.CheckInterval = 20 * time.Millisecond; c.Timeout = time.Millisecond })
	ck := e.prods.connect(t, "pg")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.eng.Run(ctx) }()
	e.prepare("Orders", "pg", "r")
	e.clk.Advance(time.Second)
	ck.next(t)
	cancel()
	<-done
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
