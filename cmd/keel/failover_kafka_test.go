package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaMetadata asks the Kafka door at addr for topic's metadata.
func kafkaMetadata(ctx context.Context, addr, topic string) (*kmsg.MetadataResponse, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	return req.RequestWith(ctx, cl)
}

// TestControllerFailoverKafka is a Kafka client across an automatic
// failover, in real processes on loopback: a group of three brokers in
// controller mode, every member with a Kafka door; franz-go's idempotent
// acks=all producer and a consumer run while the master is killed with
// SIGKILL. Metadata names the new master as leader at the new master
// epoch, node ids stay with their replicas, the producer continues (the
// time from the kill to its first acknowledgement after is logged),
// every acknowledged record is read back once, at its offset, no record
// is stored twice, and a group consumer gets every acknowledged record.
func TestControllerFailoverKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	brokers, kafkaAddrs, group := doorFailoverCluster(t, "--kafka-listen")
	dump := func() { dumpBrokers(t, brokers) }
	g := waitMasterElected(t, brokers, group)
	memberOf := func(id controller.ReplicaID) int { return brokerOf(t, brokers, g, id) }
	firstEpoch, oldMasterID := g.MasterEpoch, g.MasterID
	oldMaster := memberOf(oldMasterID)
	t.Logf("master: replica %d (broker %d) at epoch %d", oldMasterID, oldMaster, firstEpoch)

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const topic, partitions = "FailoverK", 4
	mc, err := remoting.Dial(ctx, brokers[oldMaster].addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.CreateTopic(ctx, mc, topic, partitions); err != nil {
		t.Fatal(err)
	}
	mc.Close()

	// Metadata before: the master leads at the first epoch, as node
	// oldMasterID (the replica id), every replica listed.
	lastMetadata := ""
	checkLeader := func(want controller.ReplicaID, epoch uint32, replicas int) bool {
		md, err := kafkaMetadata(ctx, kafkaAddrs[memberOf(want)], topic)
		if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != partitions {
			lastMetadata = fmt.Sprintf("%+v %v", md, err)
			return false
		}
		lastMetadata = fmt.Sprintf("brokers %+v partitions %+v", md.Brokers, md.Topics[0].Partitions)
		for _, p := range md.Topics[0].Partitions {
			if p.ErrorCode != 0 || p.Leader != int32(want) || p.LeaderEpoch != int32(epoch) || len(p.Replicas) != replicas ||
				!slices.Contains(p.Replicas, int32(want)) || !slices.Contains(p.ISR, int32(want)) {
				return false
			}
		}
		return true
	}
	waitFor(t, "Metadata naming the master (node = replica id) at the first epoch", 20*time.Second, func() bool {
		return checkLeader(oldMasterID, firstEpoch, 3)
	})

	// The consumer: every partition from its start, polling throughout
	// the failover; it must read every acknowledged record at its offset
	// and no value twice.
	cons, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {0: kgo.NewOffset().AtStart(), 1: kgo.NewOffset().AtStart(), 2: kgo.NewOffset().AtStart(), 3: kgo.NewOffset().AtStart()}}),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	type pos struct {
		partition int32
		offset    int64
	}
	var cmu sync.Mutex
	stored := map[pos]string{}
	seen := map[string]pos{}
	var quiet bool                   // the last poll found nothing
	readAt := map[string]time.Time{} // when each value was first read
	cctx, ccancel := context.WithCancel(ctx)
	consumed := make(chan struct{})

	// A group consumer too: its coordinator is the master, so it moves;
	// it must get every acknowledged record (at least once: offsets
	// committed after the last confirmed commit are read again).
	gcons, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...), kgo.ConsumeTopics(topic), kgo.ConsumerGroup("failover-group"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.AutoCommitInterval(200*time.Millisecond),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(500*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer gcons.Close()
	groupGot := map[string]bool{}
	groupDone := make(chan struct{})
	go func() {
		defer close(groupDone)
		for cctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(cctx, time.Second)
			fs := gcons.PollFetches(pctx)
			pcancel()
			cmu.Lock()
			fs.EachRecord(func(r *kgo.Record) { groupGot[string(r.Value)] = true })
			cmu.Unlock()
		}
	}()
	go func() {
		defer close(consumed)
		for cctx.Err() == nil {
			pctx, pcancel := context.WithTimeout(cctx, time.Second)
			fs := cons.PollFetches(pctx)
			pcancel()
			cmu.Lock()
			quiet = fs.NumRecords() == 0
			now := time.Now()
			fs.EachRecord(func(r *kgo.Record) {
				p := pos{r.Partition, r.Offset}
				if prev, ok := stored[p]; ok {
					if prev != string(r.Value) {
						t.Errorf("offset %d of partition %d read as %q and as %q", r.Offset, r.Partition, prev, r.Value)
					}
					return
				}
				stored[p] = string(r.Value)
				if q, ok := seen[string(r.Value)]; ok {
					t.Errorf("%s stored twice: partition %d offset %d and partition %d offset %d", r.Value, q.partition, q.offset, p.partition, p.offset)
				}
				seen[string(r.Value)] = p
				readAt[string(r.Value)] = now
			})
			cmu.Unlock()
		}
	}()

	prod, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.ProduceRequestTimeout(3*time.Second), kgo.RequestTimeoutOverhead(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()

	type ack struct {
		partition int32
		offset    int64
		sent, at  time.Time
	}
	var mu sync.Mutex
	acked := map[string]ack{}
	var produceErrs []string
	stopProducing := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // one record in flight at a time, as an ordered producer
		defer wg.Done()
		for seq := 0; ; seq++ {
			select {
			case <-stopProducing:
				return
			default:
			}
			val := fmt.Sprintf("rec-%06d", seq)
			r := &kgo.Record{Topic: topic, Partition: int32(seq % partitions), Value: []byte(val)}
			sent := time.Now()
			res := prod.ProduceSync(ctx, r)
			mu.Lock()
			if err := res.FirstErr(); err != nil {
				produceErrs = append(produceErrs, fmt.Sprintf("%s: %v", val, err))
			} else {
				acked[val] = ack{partition: r.Partition, offset: r.Offset, sent: sent, at: time.Now()}
			}
			mu.Unlock()
		}
	}()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	waitFor(t, "200 records acknowledged before the kill", 30*time.Second, func() bool { return count() >= 200 })

	killAt := time.Now()
	if err := brokers[oldMaster].proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-brokers[oldMaster].proc.exited
	before := count()
	waitFor(t, "a new master elected", 30*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID != 0 && g.MasterID != oldMasterID && g.MasterEpoch > firstEpoch
	})
	newMasterID, newEpoch := g.MasterID, g.MasterEpoch
	t.Logf("new master: replica %d (broker %d) at epoch %d", newMasterID, memberOf(newMasterID), newEpoch)
	deadlineMD := time.Now().Add(30 * time.Second)
	for !checkLeader(newMasterID, newEpoch, 2) { // the killed member is not listed: it is not live
		if time.Now().After(deadlineMD) {
			dump()
			t.Fatalf("Metadata does not name the new master (its node id unchanged) at the new epoch: %s", lastMetadata)
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitFor(t, "200 records acknowledged after the kill", 60*time.Second, func() bool { return count() >= before+200 })
	close(stopProducing)
	wg.Wait()

	mu.Lock()
	first := time.Time{}
	for _, a := range acked {
		if a.sent.After(killAt) && (first.IsZero() || a.at.Before(first)) {
			first = a.at
		}
	}
	t.Logf("kill -9 of the master to the first acknowledgement of a produce sent after it: %v (%d acknowledged before, %d in all; %d produce errors)",
		first.Sub(killAt).Round(time.Millisecond), before, len(acked), len(produceErrs))
	for _, e := range produceErrs {
		t.Logf("produce error (not acknowledged): %s", e)
	}
	mu.Unlock()

	want := map[pos]string{}
	mu.Lock()
	for v, a := range acked {
		want[pos{a.partition, a.offset}] = v
	}
	mu.Unlock()
	// Until every acknowledged record is read and a poll finds nothing
	// more (the records after them too: a copy stored twice would be
	// there).
	missing := func() int {
		n := 0
		for p := range want {
			if _, ok := stored[p]; !ok {
				n++
			}
		}
		return n
	}
	waitFor(t, "the consumer reading every acknowledged record", 60*time.Second, func() bool {
		cmu.Lock()
		defer cmu.Unlock()
		return missing() == 0 && quiet
	})
	groupMissing := func() []string {
		var out []string
		for _, v := range want {
			if !groupGot[v] {
				out = append(out, v)
			}
		}
		return out
	}
	deadlineG := time.Now().Add(60 * time.Second)
	for {
		cmu.Lock()
		gm := groupMissing()
		cmu.Unlock()
		if len(gm) == 0 {
			break
		}
		if time.Now().After(deadlineG) {
			t.Errorf("the group consumer did not get %d acknowledged records, e.g. %v", len(gm), gm[:min(len(gm), 5)])
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	ccancel()
	<-consumed
	<-groupDone
	firstRead := time.Time{}
	mu.Lock()
	for v, at := range readAt {
		if a, ok := acked[v]; ok && a.sent.After(killAt) && (firstRead.IsZero() || at.Before(firstRead)) {
			firstRead = at
		}
	}
	mu.Unlock()
	t.Logf("kill -9 of the master to the consumer's first read of a record produced after it: %v", firstRead.Sub(killAt).Round(time.Millisecond))
	for p, v := range want {
		if got, ok := stored[p]; !ok {
			t.Errorf("acknowledged %s (partition %d offset %d) not read back", v, p.partition, p.offset)
		} else if got != v {
			t.Errorf("partition %d offset %d holds %q, acknowledged as %s", p.partition, p.offset, got, v)
		}
	}
	if t.Failed() {
		dump()
	}
	t.Logf("%d acknowledged records read back at their offsets; %d records stored in all", len(want), len(stored))
}
