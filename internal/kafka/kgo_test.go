package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func produceAll(t *testing.T, cl *kgo.Client, topic string, partition int32, n int, prefix string) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, &kgo.Record{Topic: topic, Partition: partition, Key: []byte(fmt.Sprint(i)), Value: fmt.Appendf(nil, "%s-%d", prefix, i)})
	}
	res := cl.ProduceSync(ctx, rs...)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	offs := make([]int64, len(res))
	for i, r := range res {
		offs[i] = r.Record.Offset
	}
	return offs
}

func consumeN(t *testing.T, addr, topic string, partition int32, from int64, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().At(from)}}),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("consumed %d of %d: %v", len(got), n, err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		got = append(got, fs.Records()...)
	}
	return got
}

// TestKgoProduceConsumeCompressed: franz-go produces with acks=all in
// every codec and consumes everything back, in order, with dense offsets.
func TestKgoProduceConsumeCompressed(t *testing.T) {
	n := startNode(t, nil)
	codecs := []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression(), kgo.SnappyCompression(),
		kgo.Lz4Compression(), kgo.ZstdCompression()}
	const per = 200
	var want []string
	for i, codec := range codecs {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.ProducerBatchCompression(codec), kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		offs := produceAll(t, cl, "kgo-orders", 1, per, fmt.Sprint("c", i))
		cl.Close()
		for j, o := range offs {
			if o != int64(i*per+j) {
				t.Fatalf("codec %d record %d: offset %d, want %d", i, j, o, i*per+j)
			}
			want = append(want, fmt.Sprintf("c%d-%d", i, j))
		}
	}
	if got := storedCodecs(t, n, "kgo-orders", 1); len(got) != len(codecs) {
		t.Fatalf("codecs of the stored batches %v, want %d (compressed batches kept compressed)", got, len(codecs))
	}
	got := consumeN(t, n.addr, "kgo-orders", 1, 0, len(want))
	for i, r := range got[:len(want)] {
		if r.Offset != int64(i) || string(r.Value) != want[i] {
			t.Fatalf("record %d: offset %d value %q, want %d %q", i, r.Offset, r.Value, i, want[i])
		}
	}
	// From the middle of a batch: the consumer skips what it did not ask for.
	mid := consumeN(t, n.addr, "kgo-orders", 1, 517, 10)
	if mid[0].Offset != 517 || string(mid[0].Value) != want[517] {
		t.Fatalf("from 517: first %d %q", mid[0].Offset, mid[0].Value)
	}
}

// TestKgoOffsetsSurviveRestart: after a restart the next batch continues
// the partition's offsets, and everything before is still served.
func TestKgoOffsetsSurviveRestart(t *testing.T) {
	n := startNode(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	produceAll(t, cl, "restart", 0, 30, "a")
	cl.Close()
	n.stop()
	n2 := startNode(t, n.fs)
	cl, err = kgo.NewClient(kgo.SeedBrokers(n2.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs := produceAll(t, cl, "restart", 0, 5, "b")
	if offs[0] != 30 || offs[4] != 34 {
		t.Fatalf("offsets after restart %v, want 30..34", offs)
	}
	got := consumeN(t, n2.addr, "restart", 0, 0, 35)
	if got[29].Offset != 29 || string(got[29].Value) != "a-29" || got[34].Offset != 34 || string(got[34].Value) != "b-4" {
		t.Fatalf("after restart: %d %q, %d %q", got[29].Offset, got[29].Value, got[34].Offset, got[34].Value)
	}
}

// TestKgoLongPollWakesOnProduce: a consumer waiting at the high watermark
// gets a record produced later without waiting out its max wait.
func TestKgoLongPollWakesOnProduce(t *testing.T) {
	n := startNode(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceAll(t, cl, "poll", 0, 1, "first")
	cons, err := kgo.NewClient(kgo.SeedBrokers(n.addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"poll": {0: kgo.NewOffset().At(1)}}),
		kgo.FetchMaxWait(20*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := make(chan *kgo.Record, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		for {
			fs := cons.PollFetches(ctx)
			if rs := fs.Records(); len(rs) > 0 || ctx.Err() != nil {
				if len(rs) > 0 {
					got <- rs[0]
				}
				close(got)
				return
			}
		}
	}()
	// Wait until the fetch is parked in the core before producing.
	deadline := time.Now().Add(10 * time.Second)
	for n.core.HeldWaits() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no fetch was parked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	produceAll(t, cl, "poll", 0, 1, "second")
	r, ok := <-got
	if !ok || string(r.Value) != "second-0" || r.Offset != 1 {
		t.Fatalf("long poll got %v", r)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("woken after %v", d)
	}
}

// TestListOffsets: earliest, latest and by timestamp (store time of the
// batch), through franz-go's request path.
func TestListOffsets(t *testing.T) {
	n := startNode(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produceAll(t, cl, "lo", 0, 10, "a")
	// A later batch, stored at least 2 ms after the first one.
	first := time.Now()
	for time.Since(first) < 5*time.Millisecond {
		time.Sleep(time.Millisecond)
	}
	mark := time.Now().UnixMilli()
	produceAll(t, cl, "lo", 0, 5, "b")
	list := func(ts int64) (int64, int16) {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "lo"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = 0, ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		return p.Offset, p.ErrorCode
	}
	if off, code := list(-2); off != 0 || code != 0 {
		t.Errorf("earliest %d (code %d), want 0", off, code)
	}
	if off, code := list(-1); off != 15 || code != 0 {
		t.Errorf("latest %d (code %d), want 15", off, code)
	}
	if off, code := list(mark); off != 10 || code != 0 {
		t.Errorf("by time %d: %d (code %d), want 10", mark, off, code)
	}
	if off, code := list(time.Now().Add(time.Hour).UnixMilli()); off != 15 || code != 0 {
		t.Errorf("after every batch: %d (code %d), want the high watermark 15", off, code)
	}
}

// TestCreateDeleteTopics: CreateTopics makes a topic with the asked
// partition count, refuses a second creation, a replication factor above 1
// and topic configs; DeleteTopics removes it, and a topic created again
// under the same name starts at offset 0.
func TestCreateDeleteTopics(t *testing.T) {
	n := startNode(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	create := func(name string, parts int32, rf int16, configs ...string) int16 {
		req := kmsg.NewPtrCreateTopicsRequest()
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, parts, rf
		for _, c := range configs {
			rt.Configs = append(rt.Configs, kmsg.CreateTopicsRequestTopicConfig{Name: c, Value: kmsg.StringPtr("1")})
		}
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].ErrorCode
	}
	if c := create("made", 3, 1); c != 0 {
		t.Fatalf("create: %d", c)
	}
	if tc, ok := n.core.Topic("made"); !ok || tc.ReadQueueNums != 3 {
		t.Fatalf("created topic %+v %v", tc, ok)
	}
	for _, c := range []struct {
		name    string
		rf      int16
		configs []string
		want    int16
	}{{"made", 1, nil, errTopicAlreadyExists}, {"rf3", 3, nil, errInvalidReplicationFactor},
		{"cfg", 1, []string{"cleanup.policy"}, errInvalidConfig}, {"bad/name", 1, nil, errInvalidTopic},
		{"%RETRY%g", 1, nil, errInvalidTopic}, {"..", 1, nil, errInvalidTopic},
		{"orders.eu", 1, nil, errNone}, {"orders_eu", 1, nil, errInvalidTopic}} { // '.' and '_' collide

		if got := create(c.name, 1, c.rf, c.configs...); got != c.want {
			t.Errorf("create %s: %d, want %d", c.name, got, c.want)
		}
	}
	// A topic a Kafka client named with '.' may be updated by RocketMQ's
	// admin request (the name was checked at creation).
	if err := n.core.UpdateTopic(core.NewTopicConfig("orders.eu", 2, core.PermRW)); err != nil {
		t.Fatalf("RocketMQ-side update of orders.eu: %v", err)
	}
	if err := n.core.UpdateTopic(core.NewTopicConfig("new.dotted", 2, core.PermRW)); err == nil {
		t.Fatal("RocketMQ-side creation of a topic with '.' was accepted")
	}
	produceAll(t, cl, "made", 2, 7, "old")
	del := kmsg.NewPtrDeleteTopicsRequest()
	del.TopicNames = []string{"made"}
	del.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("made")}}
	del.SetVersion(5)
	dr, err := del.RequestWith(context.Background(), cl)
	if err != nil || dr.Topics[0].ErrorCode != 0 {
		t.Fatalf("delete: %v %+v", err, dr)
	}
	if _, ok := n.core.Topic("made"); ok {
		t.Fatal("topic still there after DeleteTopics")
	}
	if c := create("made", 3, -1); c != 0 {
		t.Fatalf("create again: %d", c)
	}
	cl.ForceMetadataRefresh()
	if offs := produceAll(t, cl, "made", 2, 1, "new"); offs[0] != 0 {
		t.Fatalf("first offset of the recreated topic %d, want 0", offs[0])
	}
}
