package main

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaTxnSurvivesKill9: Kafka transactions across a kill -9 of keel
// serve. A transaction whose EndTxn (commit) was answered before the kill
// is committed after the restart; one left open at the kill is aborted at
// its timeout by the restarted broker, so a read_committed consumer gets
// the committed records and those of a transaction committed after it,
// never the open one's.
func TestKafkaTxnSurvivesKill9(t *testing.T) {
	dir := t.TempDir()
	cmd, addr, exited := startKafkaServeProc(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	producer := func(addr, id string, timeout time.Duration) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.TransactionalID(id), kgo.TransactionTimeout(timeout),
			kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic("ktx"))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	produce := func(cl *kgo.Client, prefix string, n int) {
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}).FirstErr(); err != nil {
				t.Fatalf("%s: produce: %v", prefix, err)
			}
		}
	}
	a := producer(addr, "k9-a", time.Minute)
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(a, "committed", 3)
	if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := producer(addr, "k9-b", 3*time.Second)
	if err := b.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(b, "open", 2)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	b.Close()

	_, addr, _ = startKafkaServeProc(t, dir)
	c := producer(addr, "k9-c", time.Minute)
	defer c.Close()
	if err := c.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(c, "after", 1)
	if err := c.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"ktx": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []string
	waitFor(t, "the records committed after the restart, past the aborted transaction", 60*time.Second, func() bool {
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		defer fcancel()
		rd.PollFetches(fctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		return len(got) > 0 && got[len(got)-1] == "after-0"
	})
	if want := "committed-0 committed-1 committed-2 after-0"; strings.Join(got, " ") != want {
		t.Fatalf("read_committed after the kill: %q, want %q", got, want)
	}
}
