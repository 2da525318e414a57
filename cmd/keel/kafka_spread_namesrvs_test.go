package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaClusterSpreadTwoNamesrvs: two NameServers and three broker
// groups (masters broker-a node 1, broker-b node 2, broker-c node 3;
// broker-a lists the NameServers in one order, the others in the other).
// kadm's CreateTopics of 6 partitions through broker-a makes 2 queues on
// each group, every NameServer asked before the next group (a broker's
// ClusterEach answering for both), and every broker's Metadata numbers them
// alike: partitions 0-1 broker-a's, 2-3 broker-b's, 4-5 broker-c's; a
// record produced to each partition is read back from it. With the second
// NameServer stopped, a topic is still created, well within the 5 s wait.
func TestKafkaClusterSpreadTwoNamesrvs(t *testing.T) {
	ns1 := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	ns1Addr := ns1.await(t, "NameServer 1 to listen", listenRE)
	ns2 := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	ns2Addr := ns2.await(t, "NameServer 2 to listen", listenRE)
	dir := t.TempDir()
	common := "brokerClusterName=c\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\nautoCreateTopicEnable=false\nbrokerId=0\n"
	kafkaAddrs := map[int32]string{}
	for i, g := range []string{"broker-a", "broker-b", "broker-c"} {
		order := ns2Addr + ";" + ns1Addr
		if i == 0 {
			order = ns1Addr + ";" + ns2Addr
		}
		conf := writeConf(t, fmt.Sprintf("%sbrokerName=%s\nkafkaNodeId=%d\nnamesrvAddr=%s\n", common, g, i+1, order))
		r := startRun(t, "broker", "-c", conf, "--data-dir", filepath.Join(dir, g), "--broker-listen", "127.0.0.1:0",
			"--http-listen", "", "--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
		kafkaAddrs[int32(i+1)] = r.await(t, g+"'s Kafka listener", kafkaListenRE)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for _, addr := range []string{ns1Addr, ns2Addr} {
		ac := admin.New(admin.Config{NamesrvAddrs: []string{addr}})
		waitFor(t, "the three masters registered with "+addr, 30*time.Second, func() bool {
			ms, err := ac.Masters(ctx)
			return err == nil && len(ms) == 3
		})
		ac.Close()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs[1]), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	waitFor(t, "broker-a's Metadata to list the three brokers", 30*time.Second, func() bool {
		md, err := adm.Metadata(ctx)
		return err == nil && len(md.Brokers) == 3
	})
	start := time.Now()
	cr, err := adm.CreateTopic(ctx, 6, -1, nil, "spread")
	if err != nil || cr.Err != nil || cr.NumPartitions != 6 {
		t.Fatalf("create spread: %+v %v", cr, err)
	}
	t.Logf("create spread over three groups: %v", time.Since(start))
	for node, addr := range kafkaAddrs {
		bcl, err := kgo.NewClient(kgo.SeedBrokers(addr))
		if err != nil {
			t.Fatal(err)
		}
		var leaders string
		waitFor(t, fmt.Sprintf("node %d's Metadata of spread", node), 10*time.Second, func() bool {
			md, err := kadm.NewClient(bcl).Metadata(ctx, "spread")
			if err != nil {
				return false
			}
			var ls []int32
			for p := range int32(len(md.Topics["spread"].Partitions)) {
				ls = append(ls, md.Topics["spread"].Partitions[p].Leader)
			}
			leaders = fmt.Sprint(ls)
			return leaders == "[1 1 2 2 3 3]"
		})
		bcl.Close()
	}
	for p := int32(0); p < 6; p++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "spread", Partition: p, Value: fmt.Appendf(nil, "p%d", p)}).FirstErr(); err != nil {
			t.Fatalf("produce to partition %d: %v", p, err)
		}
	}
	offsets := map[int32]kgo.Offset{}
	for p := int32(0); p < 6; p++ {
		offsets[p] = kgo.NewOffset().AtStart()
	}
	cc, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs[2]), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"spread": offsets}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	got := map[int32]string{}
	for len(got) < 6 && ctx.Err() == nil {
		fs := cc.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) {
			if v := string(r.Value); v != fmt.Sprintf("p%d", r.Partition) || got[r.Partition] != "" {
				t.Errorf("partition %d: record %q (had %q)", r.Partition, v, got[r.Partition])
			}
			got[r.Partition] = string(r.Value)
		})
	}
	if len(got) != 6 {
		t.Fatalf("records read back: %v", got)
	}

	ns2.stop()
	start = time.Now()
	cr, err = adm.CreateTopic(ctx, 3, -1, nil, "one-namesrv")
	if err != nil || cr.Err != nil || cr.NumPartitions != 3 {
		t.Fatalf("create one-namesrv with NameServer 2 stopped: %+v %v", cr, err)
	}
	if d := time.Since(start); d >= 5*time.Second {
		t.Errorf("create one-namesrv with NameServer 2 stopped took %v", d)
	} else {
		t.Logf("create one-namesrv with NameServer 2 stopped: %v", d)
	}
}
