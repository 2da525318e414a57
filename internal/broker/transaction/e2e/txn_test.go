package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/keelmq/keel/internal/remoting"

	"github.com/keelmq/keel/internal/broker/transaction"
	"github.com/keelmq/keel/internal/testcluster"
)

// Plans: what the local transaction of a message does.
const (
	planCommit        = "commit"          // commits at once
	planRollback      = "rollback"        // rolls back at once
	planLaterCommit   = "later-commit"    // unknown, then commit when checked
	planLaterRollback = "later-rollback"  // unknown, then rollback when checked
	planNever         = "never"           // unknown on every check
	planSecondCommit  = "second-commit"   // unknown on the first check, commit on the second
	planNoAnswerFirst = "no-answer-first" // the first producer dies before answering; commit
)

// localDB is the application's view of its local transactions, shared by
// every producer of the group (as a database would be).
type localDB struct {
	mu       sync.Mutex
	plan     map[string]string
	executed map[string]bool
	checks   map[string]int
}

func newLocalDB() *localDB {
	return &localDB{plan: map[string]string{}, executed: map[string]bool{}, checks: map[string]int{}}
}

func (db *localDB) setPlan(body, plan string) {
	db.mu.Lock()
	db.plan[body] = plan
	db.mu.Unlock()
}

func (db *localDB) checkCount(body string) int {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.checks[body]
}

// wantStored reports whether body must end up on the real topic: its
// local transaction ran and its plan commits.
func (db *localDB) wantStored(body string) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	switch db.plan[body] {
	case planCommit, planLaterCommit, planSecondCommit, planNoAnswerFirst:
		return db.executed[body]
	}
	return false
}

// listener is one producer's TransactionListener over the shared db.
type listener struct {
	db      *localDB
	silent  bool // never answers checks (a producer about to die)
	checked chan string
}

func (l *listener) ExecuteLocalTransaction(m *primitive.Message) primitive.LocalTransactionState {
	body := string(m.Body)
	l.db.mu.Lock()
	defer l.db.mu.Unlock()
	l.db.executed[body] = true
	switch l.db.plan[body] {
	case planCommit:
		return primitive.CommitMessageState
	case planRollback:
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func (l *listener) CheckLocalTransaction(m *primitive.MessageExt) primitive.LocalTransactionState {
	body := string(m.Body)
	if l.checked != nil {
		l.checked <- body
	}
	if l.silent {
		select {} // blocks: this producer never answers
	}
	l.db.mu.Lock()
	defer l.db.mu.Unlock()
	l.db.checks[body]++
	if !l.db.executed[body] {
		return primitive.RollbackMessageState // no local record: it never happened
	}
	switch l.db.plan[body] {
	case planCommit, planLaterCommit, planNoAnswerFirst:
		return primitive.CommitMessageState
	case planSecondCommit:
		if l.db.checks[body] >= 2 {
			return primitive.CommitMessageState
		}
	case planRollback, planLaterRollback:
		return primitive.RollbackMessageState
	}
	return primitive.UnkonwnState
}

func newTxnProducer(t *testing.T, c *cluster, group string, l *listener) rocketmq.TransactionProducer {
	t.Helper()
	p, err := rocketmq.NewTransactionProducer(l,
		producer.WithNameServer(c.nsAddrs()), producer.WithGroupName(group),
		producer.WithInstanceName(testcluster.Uniq("tp")), producer.WithRetry(2),
		producer.WithSendMsgTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// received collects consumed bodies (and counts redeliveries).
type received struct {
	mu sync.Mutex
	m  map[string]int
}

func (r *received) has(body string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[body] > 0
}

func startConsumer(t *testing.T, c *cluster, topic string) *received {
	t.Helper()
	r := &received{m: map[string]int{}}
	pc, err := rocketmq.NewPushConsumer(consumer.WithNameServer(c.nsAddrs()), consumer.WithGroupName(testcluster.Uniq("cg")),
		consumer.WithInstance(testcluster.Uniq("c")), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
		func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			r.mu.Lock()
			for _, m := range ms {
				r.m[string(m.Body)]++
			}
			r.mu.Unlock()
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Shutdown() })
	return r
}

func sendTxn(ctx context.Context, p rocketmq.TransactionProducer, topic, body string) (*primitive.TransactionSendResult, error) {
	m := primitive.NewMessage(topic, []byte(body))
	m.WithTag("t")
	m.WithKeys([]string{body})
	return p.SendMessageInTransaction(ctx, m)
}

// verify checks the guarantees once every transaction is decided: exactly
// the bodies whose plan commits (and whose local transaction ran) are on
// the topic, each exactly once, and the consumer received all of them.
func verify(t *testing.T, c *cluster, db *localDB, topic string, bodies []string, r *received) {
	t.Helper()
	testcluster.WaitFor(t, 60*time.Second, "every transaction decided", func() bool { return c.Transactions().Stats().Pending == 0 })
	// A half message checked again is briefly out of the engine's table
	// while it is put back, and a commit's message is visible once it is
	// dispatched: wait until every committed one is stored, then check the
	// exact counts (none twice, none of a rollback).
	var stored map[string]int
	testcluster.WaitFor(t, 60*time.Second, "every committed message stored", func() bool {
		stored = c.stored(topic)
		for _, b := range bodies {
			if db.wantStored(b) && stored[b] == 0 {
				return false
			}
		}
		return c.Transactions().Stats().Pending == 0
	})
	want := 0
	for _, b := range bodies {
		if db.wantStored(b) {
			want++
			if stored[b] != 1 {
				t.Errorf("%s (plan %s): stored %d times, want 1", b, db.plan[b], stored[b])
			}
		} else if stored[b] != 0 {
			t.Errorf("%s (plan %s, executed %v): stored %d times, want 0", b, db.plan[b], db.executed[b], stored[b])
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	testcluster.WaitFor(t, 60*time.Second, "consumer received every committed message", func() bool {
		for _, b := range bodies {
			if db.wantStored(b) && !r.has(b) {
				return false
			}
		}
		return true
	})
	t.Logf("%d transactions, %d committed and delivered; engine %+v", len(bodies), want, c.Transactions().Stats())
}

func TestCommitRollbackUnknownAndCheckLimit(t *testing.T) {
	c := startCluster(t, func(cfg *transaction.Config) { cfg.CheckMax = 3 })
	topic := testcluster.Uniq("TxnT")
	c.createTopic(topic, 4)
	db := newLocalDB()
	p := newTxnProducer(t, c, testcluster.Uniq("pg"), &listener{db: db})
	defer p.Shutdown()
	r := startConsumer(t, c, topic)
	plans := []string{planCommit, planRollback, planLaterCommit, planLaterRollback, planNever, planSecondCommit}
	var bodies []string
	for i, plan := range plans {
		body := fmt.Sprintf("%s-%d", plan, i)
		db.setPlan(body, plan)
		bodies = append(bodies, body)
		res, err := sendTxn(context.Background(), p, topic, body)
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %s: %v %v", body, res, err)
		}
	}
	verify(t, c, db, topic, bodies, r)
	for _, b := range bodies {
		want := map[string]int{planCommit: 0, planRollback: 0, planLaterCommit: 1, planLaterRollback: 1,
			planNever: 3, planSecondCommit: 2}[db.plan[b]]
		if got := db.checkCount(b); got != want {
			t.Errorf("%s: checked %d times, want %d", b, got, want)
		}
	}
	if got := c.stored(transaction.CheckMaxTopic); got["never-4"] != 1 || len(got) != 1 {
		t.Errorf("%s holds %v, want the never-answered message once", transaction.CheckMaxTopic, got)
	}
	if s := c.Transactions().Stats(); s.Discarded != 1 || s.Committed != 3 {
		t.Errorf("engine stats %+v", s)
	}
}

func runConcurrent(t *testing.T, n, workers int, send func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				send(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

var mixed = []string{planCommit, planRollback, planLaterCommit, planLaterRollback, planCommit, planSecondCommit}

func TestManyConcurrentTransactions(t *testing.T) {
	c := startCluster(t, nil)
	topic := testcluster.Uniq("TxnMany")
	c.createTopic(topic, 8)
	db := newLocalDB()
	group := testcluster.Uniq("pg")
	p1 := newTxnProducer(t, c, group, &listener{db: db})
	defer p1.Shutdown()
	p2 := newTxnProducer(t, c, group, &listener{db: db})
	defer p2.Shutdown()
	r := startConsumer(t, c, topic)
	const n = 1200
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("m-%d", i)
		db.setPlan(bodies[i], mixed[i%len(mixed)])
	}
	start := time.Now()
	var failed sync.Map
	send := func(i int) {
		p := p1
		if i%2 == 1 {
			p = p2
		}
		if _, err := sendTxn(context.Background(), p, topic, bodies[i]); err != nil {
			failed.Store(i, err)
		}
	}
	// One send per producer first: the Go client looks a topic's route up on
	// its first send and fails a send whose lookup times out, and 48 first
	// sends queued behind that one lookup can outlast it on a loaded machine.
	send(0)
	send(1)
	runConcurrent(t, n-2, 48, func(i int) { send(i + 2) })
	t.Logf("%d transactional sends in %s", n, time.Since(start).Round(time.Millisecond))
	failed.Range(func(k, v any) bool { t.Errorf("send %v: %v", k, v); return true })
	verify(t, c, db, topic, bodies, r)
	t.Logf("all decided %s after the first send", time.Since(start).Round(time.Millisecond))
}

func TestBrokerKilledWhileTransactionsPending(t *testing.T) {
	c := startCluster(t, nil)
	topic := testcluster.Uniq("TxnKill")
	c.createTopic(topic, 4)
	db := newLocalDB()
	group := testcluster.Uniq("pg")
	p := newTxnProducer(t, c, group, &listener{db: db})
	defer p.Shutdown()
	const n = 600
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("k-%d", i)
		db.setPlan(bodies[i], mixed[i%len(mixed)])
	}
	var sent sync.WaitGroup
	sent.Add(1)
	var errs sync.Map
	go func() {
		defer sent.Done()
		runConcurrent(t, n, 32, func(i int) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := sendTxn(ctx, p, topic, bodies[i]); err != nil {
				errs.Store(i, err) // the broker was down: its local transaction never ran
			}
		})
	}()
	testcluster.WaitFor(t, 30*time.Second, "transactions in flight", func() bool {
		s := c.Transactions().Stats()
		return s.Prepared >= n/3 && s.Pending > 0
	})
	pendingAtKill := c.Transactions().Stats().Pending
	c.Kill()
	t.Logf("killed with %d undecided half messages; %d undecided after restart", pendingAtKill, c.Transactions().Stats().Pending)
	sent.Wait()
	nerr := 0
	errs.Range(func(any, any) bool { nerr++; return true })
	t.Logf("%d sends failed while the broker was down", nerr)
	// a send to a new topic makes the Go client heartbeat the new broker at
	// once (otherwise it does every 30 s), so check-backs find the producer.
	kick := testcluster.Uniq("TxnKick")
	c.createTopic(kick, 1)
	db.setPlan("kick", planCommit)
	if _, err := sendTxn(context.Background(), p, kick, "kick"); err != nil {
		t.Fatal(err)
	}
	r := startConsumer(t, c, topic)
	verify(t, c, db, topic, bodies, r)
	// and once more after a clean restart: nothing changes
	before := c.stored(topic)
	c.Kill()
	after := c.stored(topic)
	if len(after) != len(before) {
		t.Fatalf("stored bodies %d before and %d after a second kill", len(before), len(after))
	}
}

func TestProducerDisconnectsBeforeAnswering(t *testing.T) {
	c := startCluster(t, nil)
	topic := testcluster.Uniq("TxnGone")
	c.createTopic(topic, 2)
	db := newLocalDB()
	group := testcluster.Uniq("pg")
	checked := make(chan string, 16)
	a := newTxnProducer(t, c, group, &listener{db: db, silent: true, checked: checked})
	body := "gone-1"
	db.setPlan(body, planNoAnswerFirst)
	if _, err := sendTxn(context.Background(), a, topic, body); err != nil {
		t.Fatal(err)
	}
	select {
	case <-checked: // a got the check and will never answer
	case <-time.After(30 * time.Second):
		t.Fatal("first producer never checked")
	}
	a.Shutdown()
	// nobody of the group is online: the check waits, the count stays
	testcluster.WaitFor(t, 10*time.Second, "no producer online", func() bool { return c.Broker().ProducerConn(group) == nil })
	checksBefore := c.Transactions().List("", group, 0).Pending[0].Checks
	testcluster.WaitFor(t, 10*time.Second, "rounds without a producer", func() bool { return c.Transactions().Stats().NoProducer >= 3 })
	if l := c.Transactions().List("", group, 0); l.Total != 1 || l.Pending[0].Checks != checksBefore {
		t.Fatalf("pending changed without a producer: %+v (checks before %d)", l, checksBefore)
	}
	listPending(t, c, topic, group, body)
	b := newTxnProducer(t, c, group, &listener{db: db})
	defer b.Shutdown()
	// the Go client heartbeats only brokers of topics it has routes for:
	// b becomes reachable for check-backs once it sends on the topic.
	db.setPlan("gone-2", planCommit)
	if _, err := sendTxn(context.Background(), b, topic, "gone-2"); err != nil {
		t.Fatal(err)
	}
	r := startConsumer(t, c, topic)
	verify(t, c, db, topic, []string{body, "gone-2"}, r)
	if db.checkCount(body) != 1 {
		t.Fatalf("second producer answered %d checks", db.checkCount(body))
	}
}

// listPending asks the broker over the wire for the undecided half
// messages of topic (what `keel txn list` does) and expects body's.
func listPending(t *testing.T, c *cluster, topic, group, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, c.BrokerAddr(), remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqListTransactions, map[string]string{"topic": topic}, nil))
	if err != nil || resp.Code != 0 {
		t.Fatalf("list: %v %v", resp, err)
	}
	var l transaction.PendingList
	if err := json.Unmarshal(resp.Body, &l); err != nil {
		t.Fatal(err)
	}
	if l.Total != 1 || l.Pending[0].Topic != topic || l.Pending[0].ProducerGroup != group || l.Pending[0].Checks < 1 || l.Pending[0].AgeMs < 0 {
		t.Fatalf("pending list %+v", l)
	}
	_ = body
}
