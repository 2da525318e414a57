package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaClusterTwoGroups: a NameServer and two broker groups of two as
// processes — broker-a an ASYNC_MASTER (node 1) with its SLAVE (node 4),
// broker-b a SYNC_MASTER (node 2) with its SLAVE (node 3); a slave's Kafka
// door is closed, as every slave's — and a topic created on every master
// (as `keel topic create`). franz-go seeded with broker-a only sees both
// masters as brokers, partitions 0-2 on broker-a and 3-5 on broker-b with
// the slaves as in-sync replicas,
// produces acks=all to every partition and reads every record back; each
// record is in its group's queue (read over RocketMQ's protocol); a raw
// produce to the wrong broker answers NOT_LEADER_OR_FOLLOWER; a second
// broker taking a node id in use is left out of the Kafka cluster.
func TestKafkaClusterTwoGroups(t *testing.T) {
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	nsAddr := ns.await(t, "the NameServer to listen", listenRE)
	dir := t.TempDir()
	common := "brokerClusterName=c\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\nautoCreateTopicEnable=false\n"
	_, alogs := startBrokerProc(t, "-n", nsAddr, "-c", writeConf(t, common+"brokerName=broker-a\nbrokerId=0\nkafkaNodeId=1\n"),
		"--data-dir", filepath.Join(dir, "a"), "--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0",
		"--http-listen", "", "--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
	aKafka := awaitLog(t, "broker-a's Kafka listener", alogs, kafkaListenRE)
	aAddr := awaitLog(t, "broker-a's broker listener", alogs, brokerListenRE)
	aHA := awaitLog(t, "broker-a's HA listener", alogs, haListenRE)
	startBrokerProc(t, "-n", nsAddr, "-c", writeConf(t, common+"brokerName=broker-a\nbrokerRole=SLAVE\nbrokerId=1\nkafkaNodeId=4\nhaMasterAddress="+aHA+"\n"),
		"--data-dir", filepath.Join(dir, "a1"), "--broker-listen", "127.0.0.1:0",
		"--http-listen", "", "--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
	bconf := common + "brokerName=broker-b\nminInSyncReplicas=2\nreplicaAckTimeoutMillis=3000\n"
	_, blogs := startBrokerProc(t, "-n", nsAddr, "-c", writeConf(t, bconf+"brokerRole=SYNC_MASTER\nbrokerId=0\nkafkaNodeId=2\n"),
		"--data-dir", filepath.Join(dir, "b0"), "--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0",
		"--http-listen", "", "--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
	bKafka := awaitLog(t, "broker-b's Kafka listener", blogs, kafkaListenRE)
	bAddr := awaitLog(t, "broker-b's broker listener", blogs, brokerListenRE)
	bHA := awaitLog(t, "broker-b's HA listener", blogs, haListenRE)
	startBrokerProc(t, "-n", nsAddr, "-c", writeConf(t, bconf+"brokerRole=SLAVE\nbrokerId=1\nkafkaNodeId=3\nhaMasterAddress="+bHA+"\n"),
		"--data-dir", filepath.Join(dir, "b1"), "--broker-listen", "127.0.0.1:0",
		"--http-listen", "", "--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ac := admin.New(admin.Config{NamesrvAddrs: []string{nsAddr}})
	defer ac.Close()
	waitFor(t, "both masters registered", 30*time.Second, func() bool {
		ms, err := ac.Masters(ctx)
		return err == nil && len(ms) == 2
	})
	if err := ac.CreateTopic(ctx, admin.TopicSpec{Topic: "orders", ReadQueues: 3, WriteQueues: 3, Perm: admin.PermRW}); err != nil {
		t.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(aKafka), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	want := map[int32]string{1: aKafka, 2: bKafka}
	var md kadm.Metadata
	waitFor(t, "Metadata to show both groups with their slaves in sync", 60*time.Second, func() bool {
		md, err = adm.Metadata(ctx, "orders")
		if err != nil || len(md.Brokers) != 2 {
			return false
		}
		for _, b := range md.Brokers {
			if net := fmt.Sprintf("%s:%d", b.Host, b.Port); want[b.NodeID] != net {
				return false
			}
		}
		td := md.Topics["orders"]
		if td.Err != nil || len(td.Partitions) != 6 {
			return false
		}
		for p, pd := range td.Partitions {
			leader, replicas := int32(1), "[1 4]"
			if p >= 3 {
				leader, replicas = 2, "[2 3]"
			}
			if pd.Err != nil || pd.Leader != leader || fmt.Sprint(pd.Replicas) != replicas || fmt.Sprint(pd.ISR) != replicas {
				return false
			}
		}
		return true
	})
	if md.Controller != 1 {
		t.Errorf("controller %d", md.Controller)
	}
	// broker-a itself (not only whichever broker franz-go asked) knows
	// broker-b's slave as in sync, from broker-b's registration.
	waitFor(t, "broker-a's Metadata to show broker-b's in-sync slave", 30*time.Second, func() bool {
		req := kmsg.NewPtrMetadataRequest()
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr("orders")
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl.Broker(1))
		if err != nil || len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 6 {
			return false
		}
		p := resp.Topics[0].Partitions[5]
		return p.Leader == 2 && fmt.Sprint(p.Replicas) == "[2 3]" && fmt.Sprint(p.ISR) == "[2 3]"
	})
	// DescribeCluster through broker-b lists both brokers too.
	bcl, err := kgo.NewClient(kgo.SeedBrokers(bKafka))
	if err != nil {
		t.Fatal(err)
	}
	defer bcl.Close()
	dreq := kmsg.NewPtrDescribeClusterRequest()
	dresp, err := dreq.RequestWith(ctx, bcl)
	if err != nil || len(dresp.Brokers) != 2 {
		t.Fatalf("describe cluster through broker-b: %+v %v", dresp, err)
	}

	const perPartition = 4
	for p := int32(0); p < 6; p++ {
		for i := 0; i < perPartition; i++ {
			r := &kgo.Record{Topic: "orders", Partition: p, Value: fmt.Appendf(nil, "p%d-%d", p, i)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatalf("produce to partition %d: %v", p, err)
			}
			if r.Offset != int64(i) {
				t.Fatalf("partition %d record %d at offset %d", p, i, r.Offset)
			}
		}
	}
	// Every partition's records are in its group's queue: 0-2 broker-a's
	// queues 0-2, 3-5 broker-b's.
	for _, addr := range []string{aAddr, bAddr} {
		c, err := remoting.Dial(ctx, addr, remoting.ClientConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for q := 0; q < 3; q++ {
			resp, err := c.Invoke(ctx, remoting.NewRequest(remoting.ReqGetMaxOffset, map[string]string{"topic": "orders", "queueId": strconv.Itoa(q)}, nil))
			if err != nil || resp.Code != remoting.ResSuccess || resp.ExtFields["offset"] != strconv.Itoa(perPartition) {
				t.Errorf("%s queue %d: %v %+v", addr, q, err, resp)
			}
		}
		c.Close()
	}

	offsets := map[int32]kgo.Offset{}
	for p := int32(0); p < 6; p++ {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cc, err := kgo.NewClient(kgo.SeedBrokers(aKafka), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"orders": offsets}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	got := map[int32][]string{}
	for n := 0; n < 6*perPartition; {
		fs := cc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %v: %v", got, ctx.Err())
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch partition %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			got[r.Partition] = append(got[r.Partition], string(r.Value))
			n++
		})
	}
	for p := int32(0); p < 6; p++ {
		var w []string
		for i := 0; i < perPartition; i++ {
			w = append(w, fmt.Sprintf("p%d-%d", p, i))
		}
		if !slices.Equal(got[p], w) {
			t.Errorf("partition %d read %v, want %v", p, got[p], w)
		}
	}

	// A fetch and a produce of partition 4 (broker-b's) sent to broker-a,
	// and of partition 0 to broker-b, are refused with
	// NOT_LEADER_OR_FOLLOWER.
	for _, c := range []struct {
		node int32 // the broker sent to
		p    int32
	}{{1, 4}, {2, 0}} {
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
			t.Errorf("fetch of partition %d from node %d: error code %d, want 6 (NOT_LEADER_OR_FOLLOWER)", c.p, c.node, code)
		}

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
			t.Errorf("produce of partition %d to node %d: error code %d, want 6 (NOT_LEADER_OR_FOLLOWER)", c.p, c.node, code)
		}
	}

	// A broker taking node id 1, which broker-a holds, is left out of the
	// Kafka cluster, and says so; its RocketMQ registration stands, and its
	// door serves as a broker alone.
	_, clogs := startBrokerProc(t, "-n", nsAddr, "-c", writeConf(t, common+"brokerName=broker-c\nbrokerId=0\nkafkaNodeId=1\n"),
		"--data-dir", filepath.Join(dir, "c"), "--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0",
		"--http-listen", "", "--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
	cKafka := awaitLog(t, "broker-c's Kafka listener", clogs, kafkaListenRE)
	awaitLog(t, "broker-c's Kafka door refused", clogs,
		regexp.MustCompile(`msg="Kafka door left out of the cluster by the NameServer.*kafkaNodeId (1) is held by `+regexp.QuoteMeta(aAddr)))
	waitFor(t, "broker-c registered for RocketMQ clients", 30*time.Second, func() bool {
		ms, err := ac.Masters(ctx)
		return err == nil && len(ms) == 3
	})
	if md, err := adm.Metadata(ctx, "orders"); err != nil || len(md.Brokers) != 2 {
		t.Errorf("after the refused broker: %+v %v", md.Brokers, err)
	}
	waitFor(t, "the refused broker's Metadata to list itself alone", 10*time.Second, func() bool {
		ccl, err := kgo.NewClient(kgo.SeedBrokers(cKafka)) // a new client: its first request goes to the seed
		if err != nil {
			t.Fatal(err)
		}
		defer ccl.Close()
		md, err := kadm.NewClient(ccl).BrokerMetadata(ctx)
		return err == nil && len(md.Brokers) == 1 && md.Brokers[0].Port == mustPortOf(t, cKafka)
	})
}

// oneRecordBatch is an uncompressed RecordBatch v2 of one record with
// value v and no key.
func oneRecordBatch(v []byte) []byte {
	var r []byte
	r = append(r, 0)              // attributes
	r = binary.AppendVarint(r, 0) // timestamp delta
	r = binary.AppendVarint(r, 0) // offset delta
	r = binary.AppendVarint(r, -1)
	r = binary.AppendVarint(r, int64(len(v)))
	r = append(r, v...)
	r = binary.AppendVarint(r, 0) // headers
	rec := binary.AppendVarint(nil, int64(len(r)))
	rec = append(rec, r...)
	const header = 61
	b := make([]byte, header, header+len(rec))
	be := binary.BigEndian
	be.PutUint32(b[8:], uint32(header-12+len(rec)))
	b[16] = 2                                            // magic
	be.PutUint64(b[27:], uint64(time.Now().UnixMilli())) // first timestamp
	be.PutUint64(b[35:], uint64(time.Now().UnixMilli())) // max timestamp
	be.PutUint64(b[43:], 0xffffffffffffffff)             // producer id -1
	be.PutUint16(b[51:], 0xffff)                         // producer epoch -1
	be.PutUint32(b[53:], 0xffffffff)                     // base sequence -1
	be.PutUint32(b[57:], 1)                              // records
	b = append(b, rec...)
	be.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

func mustPortOf(t *testing.T, addr string) int32 {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}
