package kafka

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// txnProducer is a franz-go transactional producer on addr.
func txnProducer(t *testing.T, addr, id string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.TransactionalID(id),
		kgo.TransactionTimeout(30 * time.Second), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produceTxn produces n records to topic/partition in one transaction and
// commits or aborts it.
func produceTxn(t *testing.T, cl *kgo.Client, topic string, partition int32, prefix string, n int, commit bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce in a transaction: %v", err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction (commit %v): %v", commit, err)
	}
}

// consumeAll reads topic/partition from the start until it has want
// records and then until the partition's end (read as isolation says),
// returning the values.
func consumeValues(t *testing.T, addr, topic string, partition int32, committed bool, want int) []string {
	t.Helper()
	opts := []kgo.Opt{kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(200 * time.Millisecond)}
	if committed {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	} else {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadUncommitted()))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []string
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d: %v (%q)", len(got), want, ctx.Err(), got)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	// Nothing more within a short while: the consumer must not get more.
	short, cancel2 := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel2()
	fs := cl.PollFetches(short)
	fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	return got
}

// TestTxnCommitAbortReadCommitted: a franz-go transactional producer
// commits one transaction and aborts the next; a read_committed consumer
// gets exactly the committed records, a read_uncommitted one all of them
// (and neither a control record).
func TestTxnCommitAbortReadCommitted(t *testing.T) {
	n := startNode(t, nil)
	cl := txnProducer(t, n.addr, "tx-1")
	produceTxn(t, cl, "txn", 0, "c1", 3, true)
	produceTxn(t, cl, "txn", 0, "a1", 2, false)
	produceTxn(t, cl, "txn", 0, "c2", 2, true)
	committed := consumeValues(t, n.addr, "txn", 0, true, 5)
	want := []string{"c1-0", "c1-1", "c1-2", "c2-0", "c2-1"}
	if !slices.Equal(committed, want) {
		t.Fatalf("read_committed got %q, want %q", committed, want)
	}
	all := consumeValues(t, n.addr, "txn", 0, false, 7)
	if len(all) != 7 {
		t.Fatalf("read_uncommitted got %q, want the 7 records", all)
	}
	// 7 records and 3 markers: one offset each.
	if e := n.st.MaxOffset("txn", 0); e != 10 {
		t.Fatalf("%d entries, want 10 (7 records, 3 markers)", e)
	}
}

// TestTxnGroupTransactSession: consume-transform-produce with franz-go's
// GroupTransactSession. Every third transaction is aborted (its records
// are consumed again after the abort); a read_committed consumer of the
// output then sees every input record exactly once, and the group's
// committed offset is the input's end: offsets advanced only with the
// committed transactions.
func TestTxnGroupTransactSession(t *testing.T) {
	n := startNode(t, nil)
	const records = 30
	plain, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.AllowAutoTopicCreation(), kgo.DefaultProduceTopic("etl-in"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	produceAll(t, plain, "etl-in", 0, records, "in")
	if _, _, err := n.srv.autoCreate("etl-out"); err != nil {
		t.Fatal(err)
	}

	sess, err := kgo.NewGroupTransactSession(kgo.SeedBrokers(n.addr), kgo.TransactionalID("etl"),
		kgo.TransactionTimeout(30*time.Second), kgo.ConsumerGroup("etl-group"), kgo.ConsumeTopics("etl-in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	round, aborted := 0, 0
	for {
		committed, _ := n.core.ConsumerOffset("etl-group", "etl-in", 0, false)
		if committed >= records {
			break
		}
		fs := sess.PollRecords(ctx, 7)
		if ctx.Err() != nil {
			t.Fatalf("after %d rounds (%d aborted), committed offset %d of %d: %v", round, aborted, committed, records, ctx.Err())
		}
		if fs.Empty() {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			out := &kgo.Record{Topic: "etl-out", Partition: 0, Value: append([]byte("out-"), r.Value...)}
			sess.Produce(ctx, out, func(_ *kgo.Record, err error) {
				if err != nil {
					t.Errorf("produce: %v", err)
				}
			})
		})
		// Flushed first, so that an aborted transaction's records are in
		// the log (and must be dropped by read_committed consumers).
		if err := sess.Client().Flush(ctx); err != nil {
			t.Fatal(err)
		}
		round++
		abort := round%3 == 1
		if abort {
			aborted++
		}
		if _, err := sess.End(ctx, kgo.TransactionEndTry(!abort)); err != nil {
			t.Fatalf("round %d: end: %v", round, err)
		}
	}
	if aborted == 0 {
		t.Fatal("no transaction was aborted")
	}
	got := consumeValues(t, n.addr, "etl-out", 0, true, records)
	seen := map[string]int{}
	for _, v := range got {
		seen[v]++
	}
	for i := range records {
		if v := fmt.Sprintf("out-in-%d", i); seen[v] != 1 {
			t.Errorf("%s read %d times by read_committed, want once", v, seen[v])
		}
	}
	if len(got) != records {
		t.Fatalf("read_committed read %d records, want %d", len(got), records)
	}
	all := consumeValues(t, n.addr, "etl-out", 0, false, records+1)
	if len(all) <= records {
		t.Fatalf("read_uncommitted read %d records: the aborted ones are missing", len(all))
	}
}

// TestTxnACL: with access control, a transaction may add only partitions
// of topics its account may produce to (else nothing is added: the
// denied topic answers TOPIC_AUTHORIZATION_FAILED, the others
// OPERATION_NOT_ATTEMPTED), and offsets only for a group it may consume
// as.
func TestTxnACL(t *testing.T) {
	n := startACLNode(t)
	ctx := ctx30(t)
	admin := saslClient(t, n.addr, scram.Auth{User: "admin01", Pass: "admin-secret"}.AsSha256Mechanism())
	for _, topic := range []string{"orders", "secret", "audit"} {
		if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	x := newTxnRaw(t, n.addr, "acl-tx")
	hs := kmsg.NewPtrSASLHandshakeRequest()
	hs.Mechanism = "PLAIN"
	if r := x.rc.do(hs, 1).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
		t.Fatalf("handshake: %+v", r)
	}
	au := kmsg.NewPtrSASLAuthenticateRequest()
	au.SASLAuthBytes = []byte("\x00producer1\x00producer-secret")
	if r := x.rc.do(au, 2).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != 0 {
		t.Fatalf("authenticate: %+v", r)
	}
	if r := x.init(60000); r.ErrorCode != 0 {
		t.Fatalf("init: %+v", r)
	}
	req := kmsg.NewPtrAddPartitionsToTxnRequest()
	req.TransactionalID, req.ProducerID, req.ProducerEpoch = x.id, x.pid, x.epoch
	for _, topic := range []string{"orders", "secret"} {
		rt := kmsg.NewAddPartitionsToTxnRequestTopic()
		rt.Topic, rt.Partitions = topic, []int32{0}
		req.Topics = append(req.Topics, rt)
	}
	resp := x.rc.do(req, 3).(*kmsg.AddPartitionsToTxnResponse)
	codes := map[string]int16{}
	for _, rt := range resp.Topics {
		codes[rt.Topic] = rt.Partitions[0].ErrorCode
	}
	if codes["secret"] != errTopicAuthorization || codes["orders"] != errOperationNotAttempted {
		t.Fatalf("AddPartitionsToTxn of a permitted and a denied topic: %v", codes)
	}
	if e := n.srv.txn.entry(n.srv.txn.slot("acl-tx")); e == nil || len(e.Parts) != 0 {
		t.Fatalf("partitions added despite the denial: %+v", e)
	}
	if code := x.addOffsets("billing"); code != errGroupAuthorization {
		t.Fatalf("AddOffsetsToTxn of a denied group: %d", code)
	}
	if c := x.addParts("orders", 0); c[0] != 0 {
		t.Fatalf("AddPartitionsToTxn of a permitted topic: %v", c)
	}
	if c := x.addParts("audit", 0); c[0] != 0 {
		t.Fatalf("AddPartitionsToTxn of a permitted topic: %v", c)
	}
	// Another account describes the transaction: only the topics it may
	// read or write are shown; the producers of a topic it may not
	// touch are refused.
	consumer := kadm.NewClient(saslClient(t, n.addr, plain.Auth{User: "consumer1", Pass: "consumer-secret"}.AsMechanism()))
	d, err := consumer.DescribeTransactions(ctx, "acl-tx")
	if err != nil || d["acl-tx"].Err != nil || d["acl-tx"].State != "Ongoing" {
		t.Fatalf("DescribeTransactions by another account: %+v %v", d, err)
	}
	if ts := d["acl-tx"].Topics; len(ts) != 1 || len(ts["orders"]) != 1 {
		t.Fatalf("DescribeTransactions by an account with SUB on orders only: topics %v, want orders alone", ts)
	}
	dp := kmsg.NewPtrDescribeProducersRequest()
	for _, topic := range []string{"audit", "orders"} {
		rt := kmsg.NewDescribeProducersRequestTopic()
		rt.Topic, rt.Partitions = topic, []int32{0}
		dp.Topics = append(dp.Topics, rt)
	}
	rc := dialRaw(t, n.addr) // to this broker itself, as kafka-transactions.sh asks each leader
	hs.Mechanism = "PLAIN"
	if r := rc.do(hs, 1).(*kmsg.SASLHandshakeResponse); r.ErrorCode != 0 {
		t.Fatalf("handshake: %+v", r)
	}
	au.SASLAuthBytes = []byte("\x00consumer1\x00consumer-secret")
	if r := rc.do(au, 2).(*kmsg.SASLAuthenticateResponse); r.ErrorCode != 0 {
		t.Fatalf("authenticate: %+v", r)
	}
	dpr := rc.do(dp, 0).(*kmsg.DescribeProducersResponse)
	codes = map[string]int16{}
	for _, rt := range dpr.Topics {
		codes[rt.Topic] = rt.Partitions[0].ErrorCode
	}
	if codes["audit"] != errTopicAuthorization || codes["orders"] != 0 {
		t.Fatalf("DescribeProducers of a topic the account may not touch and of one it may read: %v", codes)
	}
}
