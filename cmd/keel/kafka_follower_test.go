package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// metricValue is the value of the series named exactly series in the
// Prometheus text at http://addr/metrics (0 when absent).
func metricValue(t *testing.T, addr, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// TestKafkaFollowerFetch: two broker groups of two as processes, every
// member with a rack (masters m0, m1; slaves s0, s1, whose Kafka doors
// open for follower fetching). Metadata lists the slaves as brokers with
// their racks, the controller a master. A franz-go consumer in rack s0
// reads every record of broker-a's partition in order, those produced
// while it waits too, and the records are delivered by broker-a's slave
// (its metrics count them); the
// slave's high watermark is never above the master's, a fetch past it
// answers OFFSET_NOT_AVAILABLE, a produce to the slave
// NOT_LEADER_OR_FOLLOWER, storing nothing, and a CreateTopics sent to it
// closes the connection, creating nothing.
func TestKafkaFollowerFetch(t *testing.T) {
	g := startKafkaGroupsRacks(t, "", true)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.kafka[0], g.kafka[1]), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	waitFor(t, "Metadata to list the four members with their racks", 30*time.Second, func() bool {
		md, err := brokerMetadata(ctx, cl)
		if err != nil || len(md.Brokers) != 4 || md.ControllerID != 1 {
			return false
		}
		want := map[int32]string{1: "m0", 2: "s0", 11: "m1", 12: "s1"}
		for _, b := range md.Brokers {
			if b.Rack == nil || *b.Rack != want[b.NodeID] {
				return false
			}
		}
		return true
	})
	if r, err := adm.CreateTopic(ctx, 2, -1, nil, "near"); err != nil || r.Err != nil {
		t.Fatalf("create near: %+v %v", r, err)
	}
	waitFor(t, "near's partition 0 led by 1 with 2 in sync", 30*time.Second, func() bool {
		md, err := adm.Metadata(ctx, "near")
		p := md.Topics["near"].Partitions[0]
		return err == nil && len(md.Topics["near"].Partitions) == 2 && p.Leader == 1 && len(p.ISR) == 2
	})
	const n = 20
	for i := 0; i < n; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "near", Partition: 0, Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	series := `keel_deliver_messages_total{door="kafka",topic="near"}`
	before := metricValue(t, g.slaveHT[0], series)

	// On failure: what the consumer did (its last log lines) and what the
	// brokers did.
	clog := &syncBuffer{}
	defer func() {
		if t.Failed() {
			g.dumpLogs()
			lines := strings.Split(clog.String(), "\n")
			t.Logf("the consumer's last log lines:\n%s", strings.Join(lines[max(0, len(lines)-300):], "\n"))
		}
	}()
	cc, err := kgo.NewClient(kgo.SeedBrokers(g.kafka[0]), kgo.Rack("s0"), kgo.WithLogger(kgo.BasicLogger(clog, kgo.LogLevelDebug, nil)),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"near": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var got []string
	for len(got) < n {
		fs := cc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %v: %v", got, ctx.Err())
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	for i, v := range got {
		if v != fmt.Sprintf("r%d", i) {
			t.Fatalf("read %v", got)
		}
	}
	if d := metricValue(t, g.slaveHT[0], series) - before; d < n {
		t.Errorf("broker-a's slave delivered %v records of near, want %d (the consumer in its rack reads from it)", d, n)
	}
	// Records produced while the consumer waits at the slave reach it as
	// the slave's store shows them.
	for i := n; i < n+5; i++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "near", Partition: 0, Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for len(got) < n+5 {
		fs := cc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %v: %v", got, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if got[n+4] != fmt.Sprintf("r%d", n+4) {
		t.Errorf("read %v", got[n:])
	}
	if d := metricValue(t, g.slaveHT[0], series) - before; d < n+5 {
		t.Errorf("broker-a's slave delivered %v records of near, want %d", d, n+5)
	}

	// Raw requests to the slave (node 2).
	fetch := func(node int, off int64) kmsg.FetchResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrFetchRequest()
		req.MaxBytes = 1 << 20
		ft := kmsg.NewFetchRequestTopic()
		ft.Topic = "near"
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.CurrentLeaderEpoch, fp.LogStartOffset = 0, off, 1<<20, -1, -1
		ft.Partitions = append(ft.Partitions, fp)
		req.Topics = append(req.Topics, ft)
		resp, err := req.RequestWith(ctx, cl.Broker(node))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	master, slave := fetch(1, 0), fetch(2, 0)
	if slave.ErrorCode != 0 || slave.HighWatermark > master.HighWatermark || slave.HighWatermark != n+5 {
		t.Errorf("slave's high watermark %d (code %d), master's %d", slave.HighWatermark, slave.ErrorCode, master.HighWatermark)
	}
	if p := fetch(2, n+10); p.ErrorCode != 78 {
		t.Errorf("fetch past the slave's high watermark: code %d, want 78 (OFFSET_NOT_AVAILABLE)", p.ErrorCode)
	}
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "near"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 0, oneRecordBatch([]byte("to the slave"))
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	presp, err := req.RequestWith(ctx, cl.Broker(2))
	if err != nil {
		t.Fatal(err)
	}
	if code := presp.Topics[0].Partitions[0].ErrorCode; code != 6 {
		t.Errorf("produce to the slave: code %d, want 6", code)
	}
	if p := fetch(2, 0); p.HighWatermark != n+5 {
		t.Errorf("the slave's high watermark moved to %d", p.HighWatermark)
	}
	// A request a slave does not serve closes the connection and changes
	// nothing: a CreateTopics sent to it creates no topic anywhere.
	ct := kmsg.NewPtrCreateTopicsRequest()
	ct.TimeoutMillis = 5000
	ctt := kmsg.NewCreateTopicsRequestTopic()
	ctt.Topic, ctt.NumPartitions, ctt.ReplicationFactor = "fromslave", 2, -1
	ct.Topics = append(ct.Topics, ctt)
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	if r, err := ct.RequestWith(sctx, cl.Broker(2)); err == nil {
		t.Errorf("CreateTopics at the slave answered %+v", r)
	}
	scancel()
	if md, err := adm.Metadata(ctx, "fromslave"); err != nil || md.Topics["fromslave"].Err == nil {
		t.Errorf("fromslave after a CreateTopics at the slave: %+v %v", md.Topics, err)
	}
	for i := range g.names {
		if off := queueOffset(t, g.slave[i], "none", "fromslave", 0); off != -1 {
			t.Errorf("%s's slave holds fromslave", g.names[i])
		}
	}
}
