package kafka

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// producer is a franz-go client that creates topics and picks partitions
// by the record.
func producer(t *testing.T, addr string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestOffsetCommitAboveHighWatermark: a commit past the high watermark is
// stored as committed, not lowered to it, as Kafka does.
func TestOffsetCommitAboveHighWatermark(t *testing.T) {
	n := startNode(t, nil)
	cl := producer(t, n.addr)
	produceAll(t, cl, "ahead", 0, 3, "v")
	rc := dialRaw(t, n.addr)
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "ahead-g", -1
	ct := kmsg.NewOffsetCommitRequestTopic()
	ct.Topic = "ahead"
	cp := kmsg.NewOffsetCommitRequestTopicPartition()
	cp.Partition, cp.Offset = 0, 10
	ct.Partitions = append(ct.Partitions, cp)
	commit.Topics = append(commit.Topics, ct)
	cr := rc.do(commit, 8).(*kmsg.OffsetCommitResponse)
	if code := cr.Topics[0].Partitions[0].ErrorCode; code != 0 {
		t.Fatalf("commit: code %d", code)
	}
	fetch := kmsg.NewPtrOffsetFetchRequest()
	fetch.Group = "ahead-g"
	fetch.Topics = []kmsg.OffsetFetchRequestTopic{{Topic: "ahead", Partitions: []int32{0}}}
	fr := rc.do(fetch, 7).(*kmsg.OffsetFetchResponse)
	if got := fr.Topics[0].Partitions[0].Offset; got != 10 {
		t.Fatalf("committed 10 above the high watermark 3, read back %d", got)
	}
}

// fetchReq asks for partition 0 of topic from offset 0.
func fetchReq(topic string, minBytes, maxWaitMs int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.ReplicaID, req.MinBytes, req.MaxWaitMillis, req.MaxBytes = -1, minBytes, maxWaitMs, 1<<20
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = topic
	fp := kmsg.NewFetchRequestTopicPartition()
	fp.Partition, fp.FetchOffset, fp.PartitionMaxBytes, fp.LogStartOffset = 0, 0, 1<<20, -1
	ft.Partitions = append(ft.Partitions, fp)
	req.Topics = append(req.Topics, ft)
	return req
}

// TestFetchWaitsForMinBytes: a fetch whose partition holds fewer bytes
// than MinBytes waits (up to MaxWaitMillis) for more instead of answering
// at once with what is there: a batch produced while it waits is in the
// same response.
func TestFetchWaitsForMinBytes(t *testing.T) {
	n := startNode(t, nil)
	cl := producer(t, n.addr)
	produceAll(t, cl, "minb", 0, 1, "first")
	rc := dialRaw(t, n.addr)
	one := rc.do(fetchReq("minb", 1, 0), 11).(*kmsg.FetchResponse)
	size := len(one.Topics[0].Partitions[0].RecordBatches)
	if size == 0 {
		t.Fatal("the first batch is not served")
	}
	// MinBytes above the one batch: the answer must wait for the next.
	rc.corr++
	corr := rc.corr
	if _, err := rc.c.Write(frameOf(fetchReq("minb", int32(size+1), 20000), 11, corr)); err != nil {
		t.Fatal(err)
	}
	produceAll(t, cl, "minb", 0, 1, "second")
	body := readResponse(t, rc.r, corr)
	resp := kmsg.NewPtrFetchResponse()
	resp.SetVersion(11)
	if err := resp.ReadFrom(body); err != nil {
		t.Fatal(err)
	}
	got := resp.Topics[0].Partitions[0].RecordBatches
	if len(got) <= size {
		t.Fatalf("MinBytes %d: answered %d bytes (the first batch only), want the second batch too", size+1, len(got))
	}
}

// TestListOffsetsByRecordTimestamp: a search by time finds the first
// record whose own timestamp is at or after the target, inside a batch
// too, not the first batch stored after it.
func TestListOffsetsByRecordTimestamp(t *testing.T) {
	n := startNode(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var rs []*kgo.Record
	for i := range 6 { // one batch: 10 ms apart, an hour ago
		rs = append(rs, &kgo.Record{Topic: "lots", Partition: 0, Value: []byte{byte(i)}, Timestamp: base.Add(time.Duration(i) * 10 * time.Millisecond)})
	}
	if err := cl.ProduceSync(ctx30(t), rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, n.addr)
	list := func(ts int64) (int64, int64) {
		req := kmsg.NewPtrListOffsetsRequest()
		req.ReplicaID = -1
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "lots"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition, rp.Timestamp = 0, ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		p := rc.do(req, 7).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]
		if p.ErrorCode != 0 {
			t.Fatalf("list %d: code %d", ts, p.ErrorCode)
		}
		return p.Offset, p.Timestamp
	}
	ms := base.UnixMilli()
	for _, c := range []struct{ ts, off, recTs int64 }{
		{ms - 1000, 0, ms},
		{ms, 0, ms},
		{ms + 1, 1, ms + 10},
		{ms + 25, 3, ms + 30},
		{ms + 50, 5, ms + 50},
		{ms + 51, 6, -1}, // after every record: the high watermark
	} {
		off, recTs := list(c.ts)
		if off != c.off || recTs != c.recTs {
			t.Errorf("ListOffsets(%d): offset %d timestamp %d, want %d and %d", c.ts-ms, off, recTs, c.off, c.recTs)
		}
	}
}

// TestCreateTopicsAsKafkaChecks: -1 partitions take defaultTopicQueueNums
// (also in DescribeConfigs' num.partitions); a valid replica assignment
// on this one-node cluster is accepted, an invalid one refused with
// INVALID_REPLICA_ASSIGNMENT; a topic named twice in one request is
// refused each time with INVALID_REQUEST.
func TestCreateTopicsAsKafkaChecks(t *testing.T) {
	n := startNode(t, nil) // defaultTopicQueueNums 2
	rc := dialRaw(t, n.addr)
	create := func(topics ...kmsg.CreateTopicsRequestTopic) []kmsg.CreateTopicsResponseTopic {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.TimeoutMillis = 5000
		req.Topics = topics
		return rc.do(req, 5).(*kmsg.CreateTopicsResponse).Topics
	}
	topic := func(name string, parts int32, rf int16, assign ...[]int32) kmsg.CreateTopicsRequestTopic {
		rt := kmsg.NewCreateTopicsRequestTopic()
		rt.Topic, rt.NumPartitions, rt.ReplicationFactor = name, parts, rf
		for i, rs := range assign {
			rt.ReplicaAssignment = append(rt.ReplicaAssignment, kmsg.CreateTopicsRequestTopicReplicaAssignment{Partition: int32(i), Replicas: rs})
		}
		return rt
	}
	if got := create(topic("dflt", -1, -1)); got[0].ErrorCode != 0 || got[0].NumPartitions != 2 {
		t.Errorf("-1 partitions: code %d, %d partitions, want 2", got[0].ErrorCode, got[0].NumPartitions)
	}
	if tc, _ := n.core.Topic("dflt"); tc.ReadQueueNums != 2 {
		t.Errorf("-1 partitions made %d queues, want 2", tc.ReadQueueNums)
	}
	if got := create(topic("assigned", -1, -1, []int32{0}, []int32{0}, []int32{0})); got[0].ErrorCode != 0 {
		t.Errorf("assignment [0] [0] [0]: code %d (%v)", got[0].ErrorCode, got[0].ErrorMessage)
	} else if tc, _ := n.core.Topic("assigned"); tc.ReadQueueNums != 3 {
		t.Errorf("assignment of 3 partitions made %d queues", tc.ReadQueueNums)
	}
	for _, c := range []struct {
		name string
		t    kmsg.CreateTopicsRequestTopic
		want int16
	}{
		{"unknown broker", topic("a1", -1, -1, []int32{1}), errInvalidReplicaAssignment},
		{"broker twice", topic("a2", -1, -1, []int32{0, 0}), errInvalidReplicaAssignment},
		{"no replica", topic("a3", -1, -1, []int32{}), errInvalidReplicaAssignment},
		{"count with assignment", topic("a4", 1, -1, []int32{0}), errInvalidRequest},
	} {
		if got := create(c.t); got[0].ErrorCode != c.want {
			t.Errorf("%s: code %d, want %d", c.name, got[0].ErrorCode, c.want)
		}
	}
	gap := topic("a5", -1, -1, []int32{0}, []int32{0})
	gap.ReplicaAssignment[1].Partition = 2
	if got := create(gap); got[0].ErrorCode != errInvalidReplicaAssignment {
		t.Errorf("partitions 0 and 2: code %d, want %d", got[0].ErrorCode, errInvalidReplicaAssignment)
	}
	got := create(topic("twice", 1, 1), topic("once", 1, 1), topic("twice", 1, 1))
	if got[0].ErrorCode != errInvalidRequest || got[2].ErrorCode != errInvalidRequest || got[1].ErrorCode != 0 {
		t.Errorf("a topic named twice: codes %d %d %d, want %d 0 %d", got[0].ErrorCode, got[1].ErrorCode, got[2].ErrorCode, errInvalidRequest, errInvalidRequest)
	}
	if _, ok := n.core.Topic("twice"); ok {
		t.Error("a topic named twice in one request was created")
	}
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: resourceBroker, ResourceName: "0", ConfigNames: []string{"num.partitions"}}}
	res := rc.do(dc, 4).(*kmsg.DescribeConfigsResponse).Resources[0]
	if len(res.Configs) != 1 || res.Configs[0].Value == nil || *res.Configs[0].Value != "2" {
		t.Errorf("num.partitions: %+v, want 2", res.Configs)
	}
}
