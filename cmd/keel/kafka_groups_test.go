package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// brokerMetadata asks a broker of cl for the cluster's brokers and
// controller. kadm's BrokerMetadata does not: once the client knows some
// brokers it answers from the client's own list, which the client renews
// only every MetadataMaxAge (5 minutes by default), so a wait on it for a
// member the client's first Metadata answer lacked waits in vain.
func brokerMetadata(ctx context.Context, cl *kgo.Client) (*kmsg.MetadataResponse, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // brokers only
	return req.RequestWith(ctx, cl)
}

// kafkaGroups is a NameServer and two broker groups (broker-a, broker-b
// of cluster c), each a SYNC_MASTER (node 1, 11) and its SLAVE (node 2,
// 12) as processes, every Kafka door on a loopback port chosen at run
// time. The slaves take their master's HA address from the NameServer,
// so a master restarted on other ports is followed.
type kafkaGroups struct {
	t       *testing.T
	ns      string
	dir     string
	names   [2]string
	conf    [2]string // the groups' broker.conf without role and ids
	master  [2]*exec.Cmd
	kafka   [2]string // the masters' Kafka addresses
	rmq     [2]string // the masters' RocketMQ addresses
	slave   [2]string // the slaves' RocketMQ addresses
	slaveKf [2]string // the slaves' Kafka addresses ("" while their door is closed)
	slaveHT [2]string // the slaves' HTTP addresses (with racks)
	procs   []procLog // every process started, in order
}

// procLog is one broker process's name and log.
type procLog struct {
	name string
	logs *syncBuffer
}

// dumpLogs logs every process's log (a failing test's context).
func (g *kafkaGroups) dumpLogs() {
	for _, p := range g.procs {
		g.t.Logf("%s log:\n%s", p.name, p.logs.String())
	}
}

func startKafkaGroups(t *testing.T, extra string) *kafkaGroups {
	t.Helper()
	return startKafkaGroupsRacks(t, extra, false)
}

// startKafkaGroupsRacks is startKafkaGroups with, if racks, group i's
// master in rack "m<i>" and its slave in rack "s<i>" (its Kafka door open
// for follower fetching) serving HTTP.
func startKafkaGroupsRacks(t *testing.T, extra string, racks bool) *kafkaGroups {
	t.Helper()
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	g := &kafkaGroups{t: t, ns: ns.await(t, "the NameServer to listen", listenRE), dir: t.TempDir(), names: [2]string{"broker-a", "broker-b"}}
	for i, name := range g.names {
		g.conf[i] = "brokerClusterName=c\nbrokerName=" + name + "\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n" +
			"autoCreateTopicEnable=false\nminInSyncReplicas=2\nreplicaAckTimeoutMillis=3000\nkafkaGroupInitialRebalanceDelayMs=0\n" + extra
		slaveConf, httpListen := g.conf[i], ""
		if racks {
			g.conf[i] += "kafkaBrokerRack=m" + strconv.Itoa(i) + "\n"
			slaveConf += "kafkaBrokerRack=s" + strconv.Itoa(i) + "\n"
			httpListen = "127.0.0.1:0"
		}
		g.startMaster(i)
		_, logs := startBrokerProc(t, "-n", g.ns, "-c", writeConf(t, slaveConf+"brokerRole=SLAVE\nbrokerId=1\nkafkaNodeId="+strconv.Itoa(i*10+2)+"\n"),
			"--data-dir", filepath.Join(g.dir, name+"-1"), "--broker-listen", "127.0.0.1:0",
			"--http-listen", httpListen, "--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
		g.procs = append(g.procs, procLog{name + "'s slave", logs})
		g.slave[i] = awaitLog(t, name+"'s slave broker listener", logs, brokerListenRE)
		if racks {
			g.slaveKf[i] = awaitLog(t, name+"'s slave Kafka listener", logs, kafkaListenRE)
			g.slaveHT[i] = awaitLog(t, name+"'s slave HTTP listener", logs, httpListenRE)
		}
	}
	ac := admin.New(admin.Config{NamesrvAddrs: []string{g.ns}})
	defer ac.Close()
	waitFor(t, "the four brokers to register", 30*time.Second, func() bool {
		bs, err := ac.Brokers(context.Background())
		return err == nil && len(bs) == 4
	})
	return g
}

// startMaster starts (or restarts, on its data) group i's master.
func (g *kafkaGroups) startMaster(i int) {
	t := g.t
	t.Helper()
	name := g.names[i]
	cmd, logs := startBrokerProc(t, "-n", g.ns, "-c", writeConf(t, g.conf[i]+"brokerRole=SYNC_MASTER\nbrokerId=0\nkafkaNodeId="+strconv.Itoa(i*10+1)+"\n"),
		"--data-dir", filepath.Join(g.dir, name+"-0"), "--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0",
		"--http-listen", "", "--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
	g.master[i] = cmd
	g.procs = append(g.procs, procLog{name + "'s master", logs})
	g.kafka[i] = awaitLog(t, name+"'s Kafka listener", logs, kafkaListenRE)
	g.rmq[i] = awaitLog(t, name+"'s broker listener", logs, brokerListenRE)
}

// kill9 kills group i's master at once (SIGKILL) and waits for its exit.
func (g *kafkaGroups) kill9(i int) {
	g.t.Helper()
	if err := g.master[i].Process.Kill(); err != nil {
		g.t.Fatal(err)
	}
	waitFor(g.t, g.names[i]+"'s master to exit", 10*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", g.rmq[i], time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
}

// queueOffset is group's committed offset of topic's queue q at the
// broker at addr over RocketMQ's QUERY_CONSUMER_OFFSET (-1: none).
func queueOffset(t *testing.T, addr, group, topic string, q int) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := remoting.Dial(ctx, addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Invoke(ctx, remoting.NewRequest(remoting.ReqQueryConsumerOffset,
		map[string]string{"consumerGroup": group, "topic": topic, "queueId": strconv.Itoa(q), "setZeroIfNotFound": "false"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Code != remoting.ResSuccess {
		return -1
	}
	n, _ := strconv.ParseInt(resp.ExtFields["offset"], 10, 64)
	return n
}

// TestKafkaConsumerGroupAcrossGroups: real processes, two broker groups
// of two (a SYNC_MASTER and its SLAVE each). kadm's CreateTopics spreads
// an 8-partition topic over both groups (4 queues each); franz-go, kcat
// and sarama produce with acks=all to every partition; a produce and a
// fetch sent to the wrong broker answer NOT_LEADER_OR_FOLLOWER. Every
// broker names the same coordinator for the group; a franz-go consumer
// group seeded with the other master reads every acknowledged record
// once, in order per partition, and commits. Each partition's offset is
// in the offset table of the group hosting it under its queue id, as
// RocketMQ's QUERY_CONSUMER_OFFSET shows on the master and, replicated,
// on its slave. The coordinator's master killed with -9 and restarted,
// and then the other master, kadm reads all eight offsets back each
// time. CreatePartitions to 10 adds broker-b's queues 4-5: partitions
// 0-7 keep their records. DeleteRecords of a partition of each group,
// sent through kadm, moves exactly those two log starts (ListOffsets).
func TestKafkaConsumerGroupAcrossGroups(t *testing.T) {
	g := startKafkaGroups(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ac := admin.New(admin.Config{NamesrvAddrs: []string{g.ns}})
	defer ac.Close()
	seeds := func() []string { return []string{g.kafka[0], g.kafka[1]} }
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds()...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	waitFor(t, "both masters in the Kafka cluster", 30*time.Second, func() bool {
		md, err := brokerMetadata(ctx, cl)
		return err == nil && len(md.Brokers) == 2
	})
	if r, err := adm.CreateTopic(ctx, 8, -1, nil, "orders"); err != nil || r.Err != nil || r.NumPartitions != 8 {
		t.Fatalf("create orders: %+v %v", r, err)
	}
	if q := topicQueues(t, ac, "orders"); !sameQueues(q, map[string]int32{"broker-a": 4, "broker-b": 4}) {
		t.Fatalf("orders' queues: %v", q)
	}
	waitFor(t, "Metadata to show 8 partitions with leaders 1 and 11", 60*time.Second, func() bool {
		md, err := adm.Metadata(ctx, "orders")
		if err != nil || len(md.Topics["orders"].Partitions) != 8 {
			return false
		}
		for p, pd := range md.Topics["orders"].Partitions {
			if want := int32(1 + 10*(p/4)); pd.Err != nil || pd.Leader != want || len(pd.ISR) != 2 {
				return false
			}
		}
		return true
	})

	// Every acknowledged record, per partition in the order acknowledged.
	acked := map[int32][]string{}
	for p := int32(0); p < 8; p++ {
		for i := 0; i < 2; i++ {
			v := fmt.Sprintf("kgo-%d-%d", p, i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("franz-go produce to %d: %v", p, err)
			}
			acked[p] = append(acked[p], v)
		}
	}
	if _, err := exec.LookPath("kcat"); err == nil {
		for p := int32(0); p < 8; p++ {
			in := fmt.Sprintf("kcat-%d-0\nkcat-%d-1\n", p, p)
			c := exec.CommandContext(ctx, "kcat", "-P", "-b", g.kafka[0], "-t", "orders", "-p", strconv.Itoa(int(p)), "-X", "acks=all")
			c.Stdin = strings.NewReader(in)
			if out, err := c.CombinedOutput(); err != nil || strings.Contains(string(out), "ERROR") {
				t.Fatalf("kcat -P to %d: %v\n%s", p, err, out)
			}
			acked[p] = append(acked[p], fmt.Sprintf("kcat-%d-0", p), fmt.Sprintf("kcat-%d-1", p))
		}
	} else {
		t.Log("kcat is not installed: librdkafka's produce not exercised")
	}
	scfg := sarama.NewConfig()
	scfg.Version = sarama.V3_6_0_0
	scfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	scfg.Producer.RequiredAcks = sarama.WaitForAll
	scfg.Producer.Idempotent = true
	scfg.Producer.Return.Successes = true
	scfg.Producer.Partitioner = sarama.NewManualPartitioner
	scfg.Net.MaxOpenRequests = 1
	sp, err := sarama.NewSyncProducer([]string{g.kafka[1]}, scfg)
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 8; p++ {
		for i := 0; i < 2; i++ {
			v := fmt.Sprintf("sarama-%d-%d", p, i)
			if gotP, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: "orders", Partition: p, Value: sarama.StringEncoder(v)}); err != nil || gotP != p {
				t.Fatalf("sarama send to %d: partition %d: %v", p, gotP, err)
			}
			acked[p] = append(acked[p], v)
		}
	}
	sp.Close()

	// The wrong broker: partition 5 (broker-b's queue 1) at broker-a,
	// partition 2 (broker-a's) at broker-b.
	for _, c := range []struct{ node, p int32 }{{1, 5}, {11, 2}} {
		req := kmsg.NewPtrProduceRequest()
		req.Acks, req.TimeoutMillis = -1, 5000
		rt := kmsg.NewProduceRequestTopic()
		rt.Topic = "orders"
		rp := kmsg.NewProduceRequestTopicPartition()
		rp.Partition, rp.Records = c.p, oneRecordBatch([]byte("misdirected"))
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(int(c.node)))
		if err != nil {
			t.Fatal(err)
		}
		if code := resp.Topics[0].Partitions[0].ErrorCode; code != 6 {
			t.Errorf("produce of partition %d to node %d: code %d, want 6 (NOT_LEADER_OR_FOLLOWER)", c.p, c.node, code)
		}
		freq := kmsg.NewPtrFetchRequest()
		freq.MaxBytes = 1 << 20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "orders"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = c.p, 1<<20, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		freq.Topics = append(freq.Topics, ft)
		fresp, err := freq.RequestWith(ctx, cl.Broker(int(c.node)))
		if err != nil {
			t.Fatal(err)
		}
		if code := fresp.Topics[0].Partitions[0].ErrorCode; code != 6 {
			t.Errorf("fetch of partition %d from node %d: code %d, want 6", c.p, c.node, code)
		}
	}

	const group = "billing"
	coord := int32(-1)
	for _, addr := range seeds() {
		c, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorKey = group
		resp, err := req.RequestWith(ctx, c)
		c.Close()
		if err != nil || resp.ErrorCode != 0 {
			t.Fatalf("FindCoordinator at %s: %+v %v", addr, resp, err)
		}
		if coord >= 0 && resp.NodeID != coord {
			t.Fatalf("brokers name different coordinators: %d and %d", coord, resp.NodeID)
		}
		coord = resp.NodeID
	}
	ci := int(coord / 10) // the coordinator's group
	other := 1 - ci

	perPartition := func(p int) int { return len(acked[int32(p)]) }
	cc, err := kgo.NewClient(kgo.SeedBrokers(g.kafka[other]), kgo.ConsumerGroup(group), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	got := map[int32][]string{}
	total := 0
	for p := 0; p < 8; p++ {
		total += perPartition(p)
	}
	for n := 0; n < total; {
		fs := cc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d: %v", n, total, ctx.Err())
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) { got[r.Partition] = append(got[r.Partition], string(r.Value)); n++ })
	}
	for p := int32(0); p < 8; p++ {
		if !slices.Equal(got[p], acked[p]) {
			t.Errorf("partition %d read %v, want %v", p, got[p], acked[p])
		}
	}
	if err := cc.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	cc.Close()

	// Each offset with its queue: partitions 0-3 broker-a's queues 0-3,
	// 4-7 broker-b's; on the slaves once replicated.
	for p := 0; p < 8; p++ {
		i, q := p/4, p%4
		if off := queueOffset(t, g.rmq[i], group, "orders", q); off != int64(perPartition(p)) {
			t.Errorf("%s queue %d: offset %d, want %d", g.names[i], q, off, perPartition(p))
		}
		waitFor(t, fmt.Sprintf("%s's slave to hold queue %d's offset", g.names[i], q), 30*time.Second, func() bool {
			return queueOffset(t, g.slave[i], group, "orders", q) == int64(perPartition(p))
		})
	}

	readBack := func(what string) {
		t.Helper()
		c, err := kgo.NewClient(kgo.SeedBrokers(seeds()...), kgo.MetadataMinAge(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var offs kadm.OffsetResponses
		last := ""
		defer func() {
			if t.Failed() {
				t.Logf("last read back: %s", last)
			}
		}()
		waitFor(t, "the offsets read back "+what, 60*time.Second, func() bool {
			offs, err = kadm.NewClient(c).FetchOffsets(ctx, group)
			if err != nil {
				last = err.Error()
				return false
			}
			for p := 0; p < 8; p++ {
				if o, ok := offs.Lookup("orders", int32(p)); !ok || o.Err != nil || o.At != int64(perPartition(p)) {
					last = fmt.Sprintf("partition %d: %+v %v (all: %+v)", p, o, ok, offs)
					return false
				}
			}
			return true
		})
	}
	readBack("before any restart")
	g.kill9(ci)
	g.startMaster(ci)
	readBack("after kill -9 and restart of the coordinator's master")
	g.kill9(other)
	g.startMaster(other)
	readBack("after kill -9 and restart of the other master")

	// CreatePartitions to 10: the new queues go to broker-b, the last
	// group; partitions 0-7 are the queues they were. (A new client: the
	// masters listen on other ports since their restarts.)
	ncl, err := kgo.NewClient(kgo.SeedBrokers(seeds()...))
	if err != nil {
		t.Fatal(err)
	}
	defer ncl.Close()
	if rs, err := kadm.NewClient(ncl).CreatePartitions(ctx, 2, "orders"); err != nil || rs.Error() != nil {
		t.Fatalf("create partitions: %+v %v", rs, err)
	}
	if q := topicQueues(t, ac, "orders"); !sameQueues(q, map[string]int32{"broker-a": 4, "broker-b": 6}) {
		t.Fatalf("orders' queues after CreatePartitions to 10: %v", q)
	}
	// (A restarted master shows its tail again once its slave confirmed
	// it anew: wait for that.)
	var lo kadm.ListedOffsets
	waitFor(t, "every partition's end offset after CreatePartitions", 30*time.Second, func() bool {
		lo, err = kadm.NewClient(ncl).ListEndOffsets(ctx, "orders")
		if err != nil {
			return false
		}
		for p := int32(0); p < 10; p++ {
			if o, ok := lo.Lookup("orders", p); !ok || o.Err != nil || o.Offset != int64(len(acked[p])) {
				return false
			}
		}
		return true
	})

	// DeleteRecords and ListOffsets over both groups, each at its leader:
	// partition 1 (broker-a's queue 1) and 6 (broker-b's queue 2) start at
	// 2 afterwards, the others at 0.
	dr, err := kadm.NewClient(ncl).DeleteRecords(ctx, kadm.Offsets{"orders": {
		1: {Topic: "orders", Partition: 1, At: 2, LeaderEpoch: -1},
		6: {Topic: "orders", Partition: 6, At: 2, LeaderEpoch: -1},
	}})
	if err != nil || dr.Error() != nil {
		t.Fatalf("delete records: %+v %v", dr, err)
	}
	so, err := kadm.NewClient(ncl).ListStartOffsets(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 10; p++ {
		want := int64(0)
		if p == 1 || p == 6 {
			want = 2
		}
		if o, ok := so.Lookup("orders", p); !ok || o.Err != nil || o.Offset != want {
			t.Errorf("start offset of partition %d after DeleteRecords: %+v, want %d", p, o, want)
		}
	}
}
