package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKadmTransactionAdmin: kadm lists and describes an open transaction
// (state, producer, timeout, start, partitions) and the partition's
// producers (the transaction's first offset while it is open); after the
// commit the id is CompleteCommit and the producer has no open
// transaction; an unknown id is TRANSACTIONAL_ID_NOT_FOUND; the state and
// producer filters of ListTransactions apply.
func TestKadmTransactionAdmin(t *testing.T) {
	n := startNode(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	idem, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer idem.Close()
	if err := idem.ProduceSync(ctx, &kgo.Record{Topic: "txa", Partition: 0, Value: []byte("plain")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl := txnProducer(t, n.addr, "tx-admin")
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b"} {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "txa", Partition: 0, Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	acl, adm := adminClient(t, n.addr)

	listed, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lt, ok := listed["tx-admin"]
	if !ok || lt.State != "Ongoing" || lt.ProducerID < 0 {
		t.Fatalf("ListTransactions: %+v, want tx-admin Ongoing", listed)
	}
	pid := lt.ProducerID
	if l, err := adm.ListTransactions(ctx, nil, []string{"CompleteCommit"}); err != nil || len(l) != 0 {
		t.Fatalf("ListTransactions filtered to CompleteCommit: %v %v, want none", l, err)
	}
	if l, err := adm.ListTransactions(ctx, []int64{pid + 1}, nil); err != nil || len(l) != 0 {
		t.Fatalf("ListTransactions filtered to another producer: %v %v, want none", l, err)
	}
	for _, c := range []struct {
		minMs int64
		want  int
	}{{-1, 1}, {0, 1}, {3_600_000, 0}} { // v1: open for at least minMs (-1: any)
		req := kmsg.NewPtrListTransactionsRequest()
		req.DurationFilterMillis = c.minMs
		resp, err := req.RequestWith(ctx, acl)
		if err != nil || resp.ErrorCode != 0 || len(resp.TransactionStates) != c.want {
			t.Fatalf("ListTransactions v1 open for %d ms: %+v %v, want %d", c.minMs, resp, err, c.want)
		}
	}
	described, err := adm.DescribeTransactions(ctx, "tx-admin", "tx-unknown")
	if err != nil {
		t.Fatal(err)
	}
	d := described["tx-admin"]
	if d.Err != nil || d.State != "Ongoing" || d.ProducerID != pid || d.TimeoutMillis != 30_000 ||
		d.StartTimestamp <= 0 || len(d.Topics["txa"]) != 1 {
		t.Fatalf("DescribeTransactions: %+v", d)
	}
	if u := described["tx-unknown"]; u.Err == nil {
		t.Fatalf("an unknown id was described: %+v", u)
	}
	producers := func() map[int64]kadm.DescribedProducer {
		t.Helper()
		ps, err := adm.DescribeProducers(ctx, kadm.TopicsSet{"txa": {0: {}}})
		if err != nil {
			t.Fatal(err)
		}
		out := map[int64]kadm.DescribedProducer{}
		for _, p := range ps["txa"].Partitions[0].ActiveProducers {
			out[p.ProducerID] = p
		}
		if e := ps["txa"].Partitions[0].Err; e != nil {
			t.Fatal(e)
		}
		return out
	}
	ps := producers()
	if p, ok := ps[pid]; !ok || p.CurrentTxnStartOffset != 1 || p.LastSequence != 1 {
		t.Fatalf("DescribeProducers while open: %+v, want producer %d at sequence 1 with its transaction from offset 1", ps, pid)
	}
	if len(ps) != 2 {
		t.Fatalf("DescribeProducers: %d producers, want the idempotent one and the transactional one: %+v", len(ps), ps)
	}

	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	waitTxnState(t, n.srv, "tx-admin", txnCompleteCommit)
	if l, err := adm.ListTransactions(ctx, []int64{pid}, []string{"CompleteCommit"}); err != nil || l["tx-admin"].State != "CompleteCommit" {
		t.Fatalf("ListTransactions after the commit: %v %v", l, err)
	}
	if p := producers()[pid]; p.CurrentTxnStartOffset != -1 {
		t.Fatalf("after the commit the producer still has an open transaction from %d", p.CurrentTxnStartOffset)
	}
}
