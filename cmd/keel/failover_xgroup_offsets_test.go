package main

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestControllerFailoverCrossGroupOffsets: committed offsets of a Kafka
// consumer group across controller failovers, in real processes: two
// controller-mode broker groups of three (broker-a, broker-b), a topic
// of four partitions (broker-a's queues 0-1 are partitions 0-1, broker-b's
// 2-3), a consumer group whose coordinator is broker-b's master, so that
// the offsets of partitions 0-1 live in broker-a (forwarded there) and
// those of 2-3 in the coordinator's own group. A franz-go group consumer
// reads and commits all four; broker-a's master is killed with SIGKILL;
// once broker-a has a new master, OffsetFetch at the coordinator reads
// the four offsets back exactly, and a new consumer of the group resumes
// at each committed offset (no record read again, none skipped) and
// commits again; then the coordinator's master (broker-b's) is killed,
// and the new coordinator (broker-b's new master) answers the offsets
// exactly, and a consumer resumes there once more.
func TestControllerFailoverCrossGroupOffsets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts ten processes")
	}
	c := startTwoGroupCluster(t)
	var all []*failoverBroker
	for _, name := range []string{"broker-a", "broker-b"} {
		all = append(all, c.byName(name).brokers...)
	}
	ok := false
	defer func() {
		if !ok {
			dumpBrokers(t, all)
		}
	}()
	base := map[string]int32{"broker-a": 0, "broker-b": 100} // the groups' kafkaNodeId
	type master struct {
		idx   int
		id    controller.ReplicaID
		epoch uint32
	}
	masters := map[string]master{}
	for _, cg := range c.groups {
		name, bs := cg.name, cg.brokers
		g := waitMasterElected(t, bs, cg.group)
		masters[name] = master{brokerOf(t, bs, g, g.MasterID), g.MasterID, g.MasterEpoch}
	}
	nodeOf := func(name string) int32 { return base[name] + int32(masters[name].id) }
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const topic, queues, partitions = "XOffsets", 2, 4
	for _, cg := range c.groups {
		name, bs := cg.name, cg.brokers
		mc, err := remoting.Dial(ctx, bs[masters[name].idx].addr, remoting.ClientConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if err := bench.CreateTopic(ctx, mc, topic, queues); err != nil {
			t.Fatal(err)
		}
		mc.Close()
	}
	seeds := append(append([]string(nil), c.byName("broker-a").kafka...), c.byName("broker-b").kafka...)
	masterDoor := func(name string) string { return c.byName(name).kafka[masters[name].idx] }

	// Metadata at a master names both groups' masters as the leaders.
	lastMD := ""
	leadersAre := func() bool {
		md, err := kafkaMetadata(ctx, masterDoor("broker-b"), topic)
		if err != nil || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != partitions {
			lastMD = fmt.Sprintf("%+v %v", md, err)
			return false
		}
		lastMD = fmt.Sprintf("partitions %+v", md.Topics[0].Partitions)
		for _, p := range md.Topics[0].Partitions {
			want := nodeOf("broker-a")
			if p.Partition >= queues {
				want = nodeOf("broker-b")
			}
			if p.ErrorCode != 0 || p.Leader != want {
				return false
			}
		}
		return true
	}
	waitLeaders := func(what string) {
		t.Helper()
		deadline := time.Now().Add(40 * time.Second)
		for !leadersAre() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; last Metadata: %s", what, lastMD)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitLeaders("Metadata naming both groups' masters as leaders")

	// A group id whose coordinator is broker-b's master.
	findCoordinator := func(id string) (int32, error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(masterDoor("broker-b")))
		if err != nil {
			return -1, err
		}
		defer cl.Close()
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.Version, req.CoordinatorKey = 3, id
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return -1, err
		}
		if resp.ErrorCode != 0 {
			return -1, fmt.Errorf("FindCoordinator %s: code %d", id, resp.ErrorCode)
		}
		return resp.NodeID, nil
	}
	group := ""
	for i := 0; group == "" && i < 64; i++ {
		id := "xoffsets-" + strconv.Itoa(i)
		node, err := findCoordinator(id)
		if err != nil {
			t.Fatal(err)
		}
		if node == nodeOf("broker-b") {
			group = id
		}
	}
	if group == "" {
		t.Fatal("no group id of 64 is coordinated by broker-b")
	}
	t.Logf("group %s, coordinated by broker-b's master (node %d)", group, nodeOf("broker-b"))

	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0), kgo.MetadataMinAge(100*time.Millisecond), kgo.MetadataMaxAge(time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }),
		kgo.ProduceRequestTimeout(3*time.Second), kgo.RecordDeliveryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	// produceTo has every partition hold upto records, sent one at a
	// time.
	produceTo := func(upto int64) {
		t.Helper()
		for p := int32(0); p < partitions; p++ {
			for {
				r := &kgo.Record{Topic: topic, Partition: p, Value: []byte("record of partition " + strconv.Itoa(int(p)))}
				if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
					t.Fatalf("produce to partition %d: %v", p, err)
				}
				if r.Offset+1 >= upto {
					break
				}
			}
		}
	}

	// consume reads, as a member of the group, every partition from the
	// committed offset from[p] to upto, checks the first offset of each
	// is from[p] and no offset comes twice or is skipped, commits, and
	// leaves the group.
	consume := func(from, upto int64) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(),
			kgo.MetadataMinAge(100*time.Millisecond), kgo.FetchMaxWait(500*time.Millisecond),
			kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		next := map[int32]int64{}
		for p := int32(0); p < partitions; p++ {
			next[p] = from
		}
		done := func() bool {
			for _, n := range next {
				if n < upto {
					return false
				}
			}
			return true
		}
		for !done() {
			if ctx.Err() != nil {
				t.Fatalf("consuming from %d to %d: read up to %v", from, upto, next)
			}
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			fs := cl.PollFetches(pctx)
			pcancel()
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset != next[r.Partition] {
					t.Fatalf("partition %d: read offset %d, want %d (committed %d): a rewind or a skip", r.Partition, r.Offset, next[r.Partition], from)
				}
				next[r.Partition]++
			})
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			t.Fatalf("commit at %d: %v", upto, err)
		}
		for p, n := range next {
			if n != upto {
				t.Fatalf("partition %d read to %d, want %d", p, n, upto)
			}
		}
	}

	// readBack waits until OffsetFetch at the group's coordinator answers
	// upto for every partition, and checks the coordinator is coordinator.
	lastOffsets := ""
	readBack := func(upto int64, coordinator int32) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
			if err != nil {
				t.Fatal(err)
			}
			offs, err := kadm.NewClient(cl).FetchOffsets(ctx, group)
			cl.Close()
			good := err == nil
			lastOffsets = fmt.Sprintf("%+v %v", offs, err)
			for p := int32(0); good && p < partitions; p++ {
				o, found := offs.Lookup(topic, p)
				switch {
				case !found || o.Err != nil:
					good = false
				case o.At != upto:
					t.Fatalf("OffsetFetch: partition %d at %d, want exactly %d: %s", p, o.At, upto, lastOffsets)
				}
			}
			node, cerr := findCoordinator(group)
			if good && cerr == nil && node == coordinator {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out reading back the offsets at %d from node %d (coordinator now %d %v); last: %s", upto, coordinator, node, cerr, lastOffsets)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	produceTo(30)
	consume(0, 30)
	readBack(30, nodeOf("broker-b"))

	kill := func(name string) {
		t.Helper()
		m := masters[name]
		b := c.byName(name).brokers[m.idx]
		if err := b.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-b.proc.exited
		var g *controller.Group
		waitFor(t, name+"'s new master elected", 40*time.Second, func() bool {
			g = c.byName(name).group()
			return g != nil && g.MasterID != 0 && g.MasterID != m.id && g.MasterEpoch > m.epoch
		})
		masters[name] = master{brokerOf(t, c.byName(name).brokers, g, g.MasterID), g.MasterID, g.MasterEpoch}
		t.Logf("%s: master replica %d killed; replica %d elected at epoch %d", name, m.id, g.MasterID, g.MasterEpoch)
	}

	// The master of the group holding partitions 0-1's offsets.
	kill("broker-a")
	waitLeaders("Metadata naming broker-a's new master")
	readBack(30, nodeOf("broker-b"))
	produceTo(40)
	consume(30, 40)
	readBack(40, nodeOf("broker-b"))

	// The coordinator's master.
	kill("broker-b")
	waitLeaders("Metadata naming broker-b's new master")
	readBack(40, nodeOf("broker-b"))
	produceTo(50)
	consume(40, 50)
	readBack(50, nodeOf("broker-b"))
	ok = !t.Failed()
}
