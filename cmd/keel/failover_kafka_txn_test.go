package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestControllerFailoverKafkaTxn: Kafka transactions across an automatic
// failover (a group of three in controller mode, SYNC_MASTER). A
// transaction committed before the master's kill -9 stays committed; one
// left open by it is aborted by the new master (at its timeout, from the
// coordinator's state the slaves replicated), so a read_committed
// consumer never reads it; the same transactional id, started again
// against the new master, commits a new transaction after it.
func TestControllerFailoverKafkaTxn(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	brokers, kafkaAddrs, group := doorFailoverCluster(t, "--kafka-listen")
	g := waitMasterElected(t, brokers, group)
	firstEpoch := g.MasterEpoch
	master := brokerOf(t, brokers, g, g.MasterID)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "FailoverTxn"
	mc, err := remoting.Dial(ctx, brokers[master].addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.CreateTopic(ctx, mc, topic, 1); err != nil {
		t.Fatal(err)
	}
	mc.Close()
	producer := func(id string, timeout time.Duration) *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...), kgo.TransactionalID(id), kgo.TransactionTimeout(timeout),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.DefaultProduceTopic(topic),
			kgo.MetadataMinAge(100*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	produce := func(cl *kgo.Client, prefix string, n int) {
		t.Helper()
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: fmt.Appendf(nil, "%s-%d", prefix, i)}).FirstErr(); err != nil {
				t.Fatalf("%s: produce: %v", prefix, err)
			}
		}
	}
	a := producer("fo-a", time.Minute)
	if err := a.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(a, "committed", 3)
	if err := a.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b := producer("fo-b", 3*time.Second)
	if err := b.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(b, "open", 2)

	if err := brokers[master].proc.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-brokers[master].proc.exited
	b.Close()
	waitFor(t, "a new master", 30*time.Second, func() bool {
		g := group()
		return g != nil && g.MasterID != 0 && g.MasterEpoch > firstEpoch
	})

	// The same transactional id again, on the new master: its
	// InitProducerId fences the old epoch and finds the open transaction
	// aborted (or aborts it); its own transaction commits after it.
	c := producer("fo-b", time.Minute)
	defer c.Close()
	waitFor(t, "a transaction begun and produced to on the new master", 30*time.Second, func() bool {
		if err := c.BeginTransaction(); err != nil {
			return false
		}
		if err := c.ProduceSync(ctx, &kgo.Record{Partition: 0, Value: []byte("after-0")}).FirstErr(); err != nil {
			c.EndTransaction(ctx, kgo.TryAbort)
			return false
		}
		return true
	})
	if err := c.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var got []string
	waitFor(t, "the records committed on the new master, past the aborted transaction", 60*time.Second, func() bool {
		fctx, fcancel := context.WithTimeout(ctx, 2*time.Second)
		defer fcancel()
		rd.PollFetches(fctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		return len(got) > 0 && got[len(got)-1] == "after-0"
	})
	if want := "committed-0 committed-1 committed-2 after-0"; strings.Join(got, " ") != want {
		dumpBrokers(t, brokers)
		t.Fatalf("read_committed after the failover: %q, want %q", got, want)
	}
}
