package dedup_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/broker/dedup"
	"github.com/keelmq/keel/internal/broker/transaction"
	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// env is a store, a broker with the de-duplicator (and the transaction
// engine) and a remoting server on one directory.
type env struct {
	t      *testing.T
	dir    string
	clk    *fakeClock
	window time.Duration
	max    int
	addr   string
	st     *store.Store
	br     *broker.Broker
	eng    *transaction.Engine
	dd     *dedup.Deduplicator
	srv    *remoting.Server
	cl     *remoting.Client
}

func newEnv(t *testing.T, window time.Duration, maxEntries int) *env {
	e := &env{t: t, dir: t.TempDir(), clk: &fakeClock{}, window: window, max: maxEntries}
	e.clk.ns.Store(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	e.start()
	t.Cleanup(e.stop)
	return e
}

func (e *env) start() {
	t := e.t
	scfg := store.DefaultConfig(e.dir)
	scfg.FlushDiskType = store.SyncFlush
	scfg.CommitLogSegmentBytes = 4 << 20
	scfg.MaxMessageBytes = 64 << 10
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 1024, 100000
	scfg.Now = e.clk.Now
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	addr := e.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.AdvertisedAddr, cfg.Now = e.dir, ln.Addr().String(), e.clk.Now
	br, err := broker.New(cfg, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := transaction.New(transaction.Config{Store: st, Producers: br, StoreHost: br.StoreHost(), Dir: e.dir, Now: e.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	br.SetTransactions(eng)
	dd, err := dedup.New(dedup.Config{Window: e.window, MaxEntries: e.max, Index: st, Now: e.clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	br.SetDeduplicator(dd)
	e.srv = remoting.NewServer(remoting.ServerConfig{OnConnClose: br.OnConnClose}, br.Handler())
	go e.srv.Serve(ln)
	e.addr, e.st, e.br, e.eng, e.dd = ln.Addr().String(), st, br, eng, dd
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if e.cl, err = remoting.Dial(ctx, e.addr, remoting.ClientConfig{}); err != nil {
		t.Fatal(err)
	}
}

func (e *env) stop() {
	if e.br == nil {
		return
	}
	e.cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.srv.Shutdown(ctx)
	e.br.Close()
	e.eng.Close()
	if err := e.st.Close(); err != nil {
		e.t.Error(err)
	}
	e.br = nil
}

func (e *env) restart() { e.stop(); e.start() }

type result struct {
	code                      int16
	msgID, queueID, queueOffs string
}

var uniqSeq atomic.Int64

func newUniq() string { return fmt.Sprintf("7F000001%024X", uniqSeq.Add(1)) }

// send sends one message with SEND_MESSAGE (V1 header), as the Go client
// does, and its retries would.
func (e *env) send(topic, uniq, body string, extra ...string) result {
	e.t.Helper()
	props := map[string]string{message.PropUniqKey: uniq, message.PropWaitStoreMsgOK: "true"}
	for i := 0; i+1 < len(extra); i += 2 {
		props[extra[i]] = extra[i+1]
	}
	req := remoting.NewRequest(remoting.ReqSendMessage, map[string]string{
		"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": "1", "sysFlag": "0", "bornTimestamp": "1", "flag": "0",
		"properties": message.EncodeProperties(props), "reconsumeTimes": "0", "unitMode": "false",
		"maxReconsumeTimes": "0", "batch": "false",
	}, []byte(body))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.cl.Invoke(ctx, req)
	if err != nil {
		e.t.Fatal(err)
	}
	return result{resp.Code, resp.Ext("msgId"), resp.Ext("queueId"), resp.Ext("queueOffset")}
}

// stored counts the records of topic queue 1 with body.
func (e *env) stored(topic, body string) int {
	e.t.Helper()
	w := e.st.Stats().WrittenOffset
	deadline := time.Now().Add(10 * time.Second)
	for e.st.VisibleOffset() < w {
		if time.Now().After(deadline) {
			e.t.Fatal("store did not confirm")
		}
		time.Sleep(time.Millisecond)
	}
	n := 0
	for off := e.st.MinOffset(topic, 1); off < e.st.MaxOffset(topic, 1); {
		r, err := e.st.GetMessage(topic, 1, off, 256, 1<<20, nil)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, rec := range r.Records {
			if string(message.View(rec).Body()) == body {
				n++
			}
		}
		off = r.NextOffset
		r.Release()
	}
	return n
}

func wantSame(t *testing.T, a, b result) {
	t.Helper()
	if a.code != 0 || b.code != 0 || a != b {
		t.Fatalf("results differ: first %+v, retry %+v", a, b)
	}
}

func TestRetryStoredOnceSameResult(t *testing.T) {
	e := newEnv(t, 120*time.Second, 0)
	u := newUniq()
	first := e.send("Orders", u, "a")
	again := e.send("Orders", u, "a")
	wantSame(t, first, again)
	if n := e.stored("Orders", "a"); n != 1 {
		t.Fatalf("stored %d times, want 1", n)
	}
	// another topic with the same key is another message
	if r := e.send("Payments", u, "a"); r.code != 0 || r.msgID == first.msgID {
		t.Fatalf("other topic: %+v", r)
	}
	if s := e.dd.Stats(); s.Duplicates != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRetryAcrossRestart(t *testing.T) {
	e := newEnv(t, 120*time.Second, 0)
	u := newUniq()
	first := e.send("Orders", u, "r")
	e.restart()
	e.clk.Advance(30 * time.Second)
	again := e.send("Orders", u, "r")
	wantSame(t, first, again)
	if n := e.stored("Orders", "r"); n != 1 {
		t.Fatalf("stored %d times, want 1", n)
	}
	if s := e.dd.Stats(); s.IndexHits != 1 {
		t.Fatalf("stats %+v", s)
	}
	// a new key right after the restart is stored (after an index miss)
	if r := e.send("Orders", newUniq(), "r2"); r.code != 0 || e.stored("Orders", "r2") != 1 {
		t.Fatalf("new key after restart: %+v", r)
	}
}

func TestOutsideWindowStoredAgain(t *testing.T) {
	e := newEnv(t, 120*time.Second, 0)
	u := newUniq()
	first := e.send("Orders", u, "w")
	e.clk.Advance(121 * time.Second)
	again := e.send("Orders", u, "w")
	if again.code != 0 || again.msgID == first.msgID {
		t.Fatalf("outside the window: %+v vs %+v", again, first)
	}
	if n := e.stored("Orders", "w"); n != 2 {
		t.Fatalf("stored %d times, want 2", n)
	}
	// and across a restart outside the window (index lookup must not match)
	e.restart()
	e.clk.Advance(121 * time.Second)
	e.send("Orders", u, "w")
	if n := e.stored("Orders", "w"); n != 3 {
		t.Fatalf("stored %d times, want 3", n)
	}
}

func TestWindowZeroStoresTwice(t *testing.T) {
	e := newEnv(t, 0, 0)
	u := newUniq()
	a, b := e.send("Orders", u, "z"), e.send("Orders", u, "z")
	if a.code != 0 || b.code != 0 || a.msgID == b.msgID {
		t.Fatalf("window 0: %+v %+v", a, b)
	}
	if n := e.stored("Orders", "z"); n != 2 {
		t.Fatalf("stored %d times, want 2", n)
	}
}

func TestConcurrentDuplicatesStoredOnce(t *testing.T) {
	e := newEnv(t, 120*time.Second, 0)
	u := newUniq()
	const n = 32
	res := make([]result, n)
	var wg sync.WaitGroup
	for i := range res {
		wg.Add(1)
		go func() { defer wg.Done(); res[i] = e.send("Orders", u, "c") }()
	}
	wg.Wait()
	for _, r := range res[1:] {
		wantSame(t, res[0], r)
	}
	if got := e.stored("Orders", "c"); got != 1 {
		t.Fatalf("stored %d times, want 1", got)
	}
}

func TestEvictionFallsBackToIndex(t *testing.T) {
	e := newEnv(t, 120*time.Second, 4)
	var keys []string
	var first []result
	for i := 0; i < 10; i++ {
		keys = append(keys, newUniq())
		first = append(first, e.send("Orders", keys[i], "e"+strconv.Itoa(i)))
		e.clk.Advance(time.Second)
	}
	for i := range keys {
		wantSame(t, first[i], e.send("Orders", keys[i], "e"+strconv.Itoa(i)))
		if n := e.stored("Orders", "e"+strconv.Itoa(i)); n != 1 {
			t.Fatalf("e%d stored %d times", i, n)
		}
	}
	s := e.dd.Stats()
	if s.Evictions == 0 || s.IndexHits == 0 || s.Entries > 4 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPreparedRetryOneHalf(t *testing.T) {
	e := newEnv(t, 120*time.Second, 0)
	u := newUniq()
	extra := []string{message.PropTransactionPrepared, "true", message.PropProducerGroup, "pg"}
	first := e.send("Orders", u, "tx", extra...)
	again := e.send("Orders", u, "tx", extra...)
	wantSame(t, first, again)
	if s := e.eng.Stats(); s.Prepared != 1 || s.Pending != 1 {
		t.Fatalf("engine %+v", s)
	}
	e.restart()
	wantSame(t, first, e.send("Orders", u, "tx", extra...)) // found as a half message through the index
	if s := e.eng.Stats(); s.Prepared != 0 || s.Pending != 1 {
		t.Fatalf("engine after restart %+v", s)
	}
	_, phys, err := message.ParseOffsetMsgID(first.msgID)
	if err != nil {
		t.Fatal(err)
	}
	if ap, _ := netip.ParseAddrPort(e.addr); ap.Port() == 0 {
		t.Fatal("no address")
	}
	end := remoting.NewRequest(remoting.ReqEndTransaction, map[string]string{"producerGroup": "pg",
		"tranStateTableOffset": first.queueOffs, "commitLogOffset": strconv.FormatInt(phys, 10), "commitOrRollback": "8"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if resp, err := e.cl.Invoke(ctx, end); err != nil || resp.Code != 0 {
		t.Fatalf("END: %v %v", resp, err)
	}
	if n := e.stored("Orders", "tx"); n != 1 {
		t.Fatalf("committed %d times", n)
	}
}

func TestFailedSendNotRemembered(t *testing.T) {
	d, err := dedup.New(dedup.Config{Window: time.Minute, Index: nopIndex{}})
	if err != nil {
		t.Fatal(err)
	}
	orig, release, err := d.Check(context.Background(), "T", "U")
	if orig != nil || err != nil {
		t.Fatal(orig, err)
	}
	release(nil, store.PutResult{Status: store.PutServiceNotAvailable})
	release(nil, store.PutResult{Status: store.PutOK}) // second call ignored
	if orig, _, _ := d.Check(context.Background(), "T", "U"); orig != nil {
		t.Fatal("failed send remembered")
	}
}

func TestWaiterGivesUpWithContext(t *testing.T) {
	d, _ := dedup.New(dedup.Config{Window: time.Minute, Index: nopIndex{}})
	_, release, _ := d.Check(context.Background(), "T", "U")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := d.Check(ctx, "T", "U"); err == nil {
		t.Fatal("waiter did not return on a cancelled context")
	}
	release(&message.Message{QueueOffset: 7, StoreTimestamp: time.Now().UnixMilli()}, store.PutResult{})
	orig, _, _ := d.Check(context.Background(), "T", "U")
	if orig == nil || orig.QueueOffset != 7 {
		t.Fatalf("after release: %+v", orig)
	}
}

type nopIndex struct{}

func (nopIndex) QueryByKey(string, string, int, int64, int64) ([]int64, error) { return nil, nil }
func (nopIndex) LookMessageByOffset(int64) ([]byte, error)                     { return nil, nil }

// sendBatch sends SEND_BATCH_MESSAGE (V2 header) with one item per body;
// uniq[i] == "" leaves the item without a UNIQ_KEY (as the Go client does).
func (e *env) sendBatch(topic string, bodies, uniq []string) (int16, []string) {
	e.t.Helper()
	var items []message.BatchItem
	for i, b := range bodies {
		props := map[string]string{}
		if uniq[i] != "" {
			props[message.PropUniqKey] = uniq[i]
		}
		items = append(items, message.BatchItem{Body: []byte(b), Properties: message.EncodeProperties(props)})
	}
	body, err := message.EncodeBatch(items)
	if err != nil {
		e.t.Fatal(err)
	}
	req := remoting.NewRequest(remoting.ReqSendBatchMessage, map[string]string{
		"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1", "h": "0", "i": "",
		"j": "0", "k": "false", "l": "0", "m": "true"}, body)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.cl.Invoke(ctx, req)
	if err != nil {
		e.t.Fatal(err)
	}
	if resp.Code != 0 {
		return resp.Code, nil
	}
	return resp.Code, strings.Split(resp.Ext("msgId"), ",")
}

func TestBatchDeduplicatedPerMessage(t *testing.T) {
	e := newEnv(t, 120*time.Second, 0)
	a, b, c, d := newUniq(), newUniq(), newUniq(), newUniq()
	_, first := e.sendBatch("Orders", []string{"A", "B"}, []string{a, b})
	_, again := e.sendBatch("Orders", []string{"A", "B"}, []string{a, b})
	if len(first) != 2 || strings.Join(first, ",") != strings.Join(again, ",") {
		t.Fatalf("batch retry ids %v, first %v", again, first)
	}
	_, mixed := e.sendBatch("Orders", []string{"C", "A"}, []string{c, a})
	if len(mixed) != 2 || mixed[1] != first[0] || mixed[0] == first[0] || mixed[0] == first[1] {
		t.Fatalf("mixed batch ids %v (first %v)", mixed, first)
	}
	_, same := e.sendBatch("Orders", []string{"D", "D"}, []string{d, d})
	if len(same) != 2 || same[0] != same[1] {
		t.Fatalf("repeated key in one batch: %v", same)
	}
	// a single send of a key first stored in a batch is a duplicate too
	if r := e.send("Orders", b, "B"); r.msgID != first[1] {
		t.Fatalf("single retry of a batch item: %+v, want %s", r, first[1])
	}
	for body, want := range map[string]int{"A": 1, "B": 1, "C": 1, "D": 1} {
		if n := e.stored("Orders", body); n != want {
			t.Fatalf("%s stored %d times, want %d", body, n, want)
		}
	}
	// Go client batches carry no UNIQ_KEY: nothing to de-duplicate
	e.sendBatch("Orders", []string{"G", "G"}, []string{"", ""})
	e.sendBatch("Orders", []string{"G", "G"}, []string{"", ""})
	if n := e.stored("Orders", "G"); n != 4 {
		t.Fatalf("keyless batch items stored %d times, want 4", n)
	}
	e.restart()
	_, afterRestart := e.sendBatch("Orders", []string{"A", "B"}, []string{a, b})
	if strings.Join(afterRestart, ",") != strings.Join(first, ",") {
		t.Fatalf("batch retry after restart ids %v, first %v", afterRestart, first)
	}
}

// countingIndex counts the key-index lookups a miss makes.
type countingIndex struct{ queries atomic.Int64 }

func (c *countingIndex) QueryByKey(string, string, int, int64, int64) ([]int64, error) {
	c.queries.Add(1)
	return nil, nil
}
func (*countingIndex) LookMessageByOffset(int64) ([]byte, error) { return nil, nil }

// TestStartsEmptyNeedsNoIndex: a de-duplicator made over a store that was
// empty answers a new key from its table alone; one made over a store with
// data looks the key up in the index for the first window.
func TestStartsEmptyNeedsNoIndex(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	for _, empty := range []bool{true, false} {
		idx := &countingIndex{}
		d, err := dedup.New(dedup.Config{Window: time.Minute, Index: idx, Now: clk.Now, StartsEmpty: empty})
		if err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
		orig, release, err := d.Check(context.Background(), "Orders", "K1")
		if err != nil || orig != nil {
			t.Fatalf("empty %v: new key: orig %v, err %v", empty, orig, err)
		}
		release(&message.Message{StoreTimestamp: clk.Now().UnixMilli()}, store.PutResult{Status: store.PutOK})
		if orig, _, _ := d.Check(context.Background(), "Orders", "K1"); orig == nil {
			t.Fatalf("empty %v: the retry was not found in the table", empty)
		}
		lookups := d.Stats().IndexLookups
		if empty && (lookups != 0 || idx.queries.Load() != 0) {
			t.Fatalf("empty store: %d index lookups (%d queries), want none", lookups, idx.queries.Load())
		}
		if !empty && lookups != 1 {
			t.Fatalf("store with data: %d index lookups, want 1", lookups)
		}
	}
}

// A Check that would wait for a pending send of its key first calls the
// function core.WithBeforeWait put in its context: the caller may hold
// that send, not yet stored. Here that function stores it, and the Check
// answers the duplicate.
func TestCheckCallsBeforeWait(t *testing.T) {
	d, err := dedup.New(dedup.Config{Window: time.Hour, Index: nopIndex{}, StartsEmpty: true})
	if err != nil {
		t.Fatal(err)
	}
	orig, release, err := d.Check(context.Background(), "T", "K")
	if err != nil || orig != nil {
		t.Fatalf("first check: %v %v", orig, err)
	}
	calls := 0
	ctx := core.WithBeforeWait(context.Background(), func() {
		calls++
		release(&message.Message{QueueOffset: 7, StoreTimestamp: time.Now().UnixMilli()}, store.PutResult{Status: store.PutOK})
	})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	dup, _, err := d.Check(ctx, "T", "K")
	if err != nil || dup == nil || dup.QueueOffset != 7 {
		t.Fatalf("second check: %+v %v", dup, err)
	}
	if calls != 1 {
		t.Fatalf("BeforeWait called %d times", calls)
	}
	if _, _, err := d.Check(ctx, "T", "K2"); err != nil || calls != 1 {
		t.Fatalf("a check with nothing to wait for: %v, BeforeWait called %d times", err, calls)
	}
}

// TestEvictionKeepsNewKeysOffTheIndex: once the ring is full and evicts, a
// new key is still answered from the table alone; only a key that was
// evicted within the window is looked up in the index.
func TestEvictionKeepsNewKeysOffTheIndex(t *testing.T) {
	clk := &fakeClock{}
	clk.ns.Store(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	idx := &countingIndex{}
	d, err := dedup.New(dedup.Config{Window: time.Minute, MaxEntries: 4, Index: idx, Now: clk.Now, StartsEmpty: true})
	if err != nil {
		t.Fatal(err)
	}
	store1 := func(key string) {
		t.Helper()
		orig, release, err := d.Check(context.Background(), "Orders", key)
		if err != nil || orig != nil {
			t.Fatalf("%s: orig %v, err %v", key, orig, err)
		}
		release(&message.Message{StoreTimestamp: clk.Now().UnixMilli()}, store.PutResult{Status: store.PutOK})
		clk.Advance(time.Second)
	}
	for i := range 40 {
		store1("K" + strconv.Itoa(i))
	}
	s := d.Stats()
	if s.Evictions != 36 || s.IndexLookups != 0 || idx.queries.Load() != 0 {
		t.Fatalf("40 new keys through a ring of 4: %+v, %d index queries; want 36 evictions and no lookups", s, idx.queries.Load())
	}
	// K30 was evicted 9 s ago, within the window: its retry is looked up.
	store1("K30")
	if s := d.Stats(); s.IndexLookups != 1 {
		t.Fatalf("retry of an evicted key: %d index lookups, want 1", s.IndexLookups)
	}
}
