package kafka

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestKafkaReadsRocketMQAfterBatches: RocketMQ messages stored after Kafka
// batches are read by a Kafka consumer at their queue offsets, between
// the batches' records (a batch of n records has n entries, so offsets
// stay dense), and a Kafka batch after them continues from there.
func TestKafkaReadsRocketMQAfterBatches(t *testing.T) {
	n := startNode(t, nil)
	if _, err := n.core.EnsureTopic("after", 1, 6); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if offs := produceAll(t, cl, "after", 0, 3, "kafka-a"); offs[0] != 0 || offs[2] != 2 {
		t.Fatalf("first batch at %v", offs)
	}
	from := int(n.st.MaxOffset("after", 0)) // 3: one entry per record
	putRocketMQ(t, n.st, "after", from, 2)
	if offs := produceAll(t, cl, "after", 0, 2, "kafka-b"); offs[0] != 5 {
		t.Fatalf("the batch after the RocketMQ messages got offsets %v, want from 5", offs)
	}
	want := []string{"kafka-a-0", "kafka-a-1", "kafka-a-2", fmt.Sprint("rmq-", from), fmt.Sprint("rmq-", from+1), "kafka-b-0", "kafka-b-1"}
	got := consumeN(t, n.addr, "after", 0, 0, len(want))
	for i, r := range got {
		if r.Offset != int64(i) || string(r.Value) != want[i] {
			t.Errorf("record %d: offset %d value %q, want %q", i, r.Offset, r.Value, want[i])
		}
	}
	// From inside the first batch, and at a RocketMQ message.
	if r := consumeN(t, n.addr, "after", 0, 1, 1)[0]; r.Offset != 1 || string(r.Value) != "kafka-a-1" {
		t.Errorf("from 1: %d %q", r.Offset, r.Value)
	}
	if r := consumeN(t, n.addr, "after", 0, 4, 2); r[0].Offset != 4 || string(r[0].Value) != "rmq-4" || r[1].Offset != 5 {
		t.Errorf("from 4: %d %q, then %d", r[0].Offset, r[0].Value, r[1].Offset)
	}
	if hwm := n.st.MaxOffset("after", 0); hwm != 7 {
		t.Errorf("%d entries, want one per record: 7", hwm)
	}
}

// TestOffsetsNotReusedAfterRetention: once retention has removed every
// record of a partition and the broker restarts, the next batch continues
// the partition's offsets (the ConsumeQueue keeps its max offset), so no
// offset a consumer saw is given to another record, and the log start is
// there too.
func TestOffsetsNotReusedAfterRetention(t *testing.T) {
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 2, 4, 10, 0, 0, time.Local).UnixNano())
	mod := func(c *store.Config) {
		c.Now = func() time.Time { return time.Unix(0, now.Load()) }
		c.CommitLogSegmentBytes, c.MaxMessageBytes = 128<<10, 32<<10
		c.ConsumeQueueSegmentEntries = 20
		c.RetentionCheckInterval = 10 * time.Millisecond
		c.FileReservedTime = time.Hour
		c.DeleteWhen = "04"
		c.DiskReserveBytes = 0
	}
	fs := vfs.NewMem()
	n := startNodeStore(t, fs, Config{}, mod)
	if _, err := n.core.EnsureTopic("ret", 1, 6); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, n.addr)
	big := func(topic string, records int) kmsg.ProduceResponseTopicPartition {
		return rc.do(produceReq(-1, topic, bigBatch(records)), 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	}
	for i := range 3 {
		if got := big("ret", 10); got.ErrorCode != 0 || got.BaseOffset != int64(i*10) {
			t.Fatalf("batch %d: %+v", i, got)
		}
	}
	for range 14 { // another topic fills the following segments
		if got := big("filler", 10); got.ErrorCode != 0 {
			t.Fatalf("filler: %+v", got)
		}
	}
	now.Store(time.Date(2026, 1, 6, 4, 30, 0, 0, time.Local).UnixNano())
	if got := big("filler", 1); got.ErrorCode != 0 {
		t.Fatalf("filler: %+v", got)
	}
	deadline := time.Now().Add(20 * time.Second)
	for n.st.MaxOffset("ret", 0) == 0 || n.st.MinOffset("ret", 0) < n.st.MaxOffset("ret", 0) {
		if time.Now().After(deadline) {
			t.Fatalf("retention did not remove the partition: min %d max %d", n.st.MinOffset("ret", 0), n.st.MaxOffset("ret", 0))
		}
		time.Sleep(5 * time.Millisecond)
	}
	n.stop()
	n2 := startNodeStore(t, fs, Config{}, mod)
	rc = dialRaw(t, n2.addr)
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "ret"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -2
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	if r := rc.do(lo, 4).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; r.ErrorCode != 0 || r.Offset != 30 {
		t.Fatalf("earliest after retention and restart: %+v, want 30", r)
	}
	if got := big("ret", 4); got.ErrorCode != 0 || got.BaseOffset != 30 {
		t.Fatalf("the batch after retention and a restart: %+v, want base offset 30", got)
	}
	if r := consumeN(t, n2.addr, "ret", 0, 30, 4); r[0].Offset != 30 || r[3].Offset != 33 {
		t.Fatalf("read back at %d..%d", r[0].Offset, r[3].Offset)
	}
}

// bigBatch is testBatch with values of 2000 bytes.
func bigBatch(n int) []byte {
	var recs []byte
	for i := range n {
		var r []byte
		r = append(r, 0)                     // attributes
		r = binary.AppendVarint(r, 0)        // timestamp delta
		r = binary.AppendVarint(r, int64(i)) // offset delta
		r = binary.AppendVarint(r, -1)       // null key
		v := bytes.Repeat([]byte{'x'}, 2000)
		r = binary.AppendVarint(r, int64(len(v)))
		r = append(r, v...)
		r = binary.AppendVarint(r, 0) // headers
		recs = binary.AppendVarint(recs, int64(len(r)))
		recs = append(recs, r...)
	}
	b := testBatch(0, 0)[:batchHeaderBytes]
	binary.BigEndian.PutUint32(b[8:], uint32(batchHeaderBytes-12+len(recs)))
	binary.BigEndian.PutUint32(b[23:], uint32(n-1))
	binary.BigEndian.PutUint32(b[57:], uint32(n))
	return recrc(append(b, recs...))
}

// TestOldFormatPartitionRefused: a partition holding a Kafka batch stored
// the way the previous release stored it (one entry for the batch, no
// FlagEntryPerMessage) is refused to Kafka clients with
// KAFKA_STORAGE_ERROR and a message saying why, for produce, fetch, list
// offsets and commits; a partition without one is served, and the store
// still reads the batch (RocketMQ and AMQP consumers go on).
func TestOldFormatPartitionRefused(t *testing.T) {
	n := startNode(t, nil)
	if _, err := n.core.EnsureTopic("legacy", 2, 6); err != nil {
		t.Fatal(err)
	}
	rec, err := record.AppendEnvelope(nil, record.KafkaBatch, 3, []record.Dest{{Topic: "legacy", QueueID: 0}}, testBatch(3, 0))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := n.st.PutRecord(context.Background(), rec); !r.OK() {
		t.Fatal(r.Status, r.Err)
	}
	waitEntries(t, n.st, "legacy", 1)
	rc := dialRaw(t, n.addr)
	prod := func(p int32) kmsg.ProduceResponseTopicPartition {
		req := produceReq(-1, "legacy", testBatch(2, 0))
		req.Topics[0].Partitions[0].Partition = p
		return rc.do(req, 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]
	}
	if got := prod(0); got.ErrorCode != errKafkaStorage || got.ErrorMessage == nil || !strings.Contains(*got.ErrorMessage, "earlier release") {
		t.Fatalf("produce to the old partition: %+v", got)
	}
	if got := prod(1); got.ErrorCode != 0 || got.BaseOffset != 0 {
		t.Fatalf("produce to a partition without old batches: %+v", got)
	}
	fr := kmsg.NewPtrFetchRequest()
	ft := kmsg.NewFetchRequestTopic()
	ft.Topic = "legacy"
	for p := range int32(2) {
		fp := kmsg.NewFetchRequestTopicPartition()
		fp.Partition, fp.PartitionMaxBytes = p, 1<<20
		ft.Partitions = append(ft.Partitions, fp)
	}
	fr.Topics, fr.MaxBytes = append(fr.Topics, ft), 1<<20
	ps := rc.do(fr, 11).(*kmsg.FetchResponse).Topics[0].Partitions
	if ps[0].ErrorCode != errKafkaStorage || ps[1].ErrorCode != 0 || len(ps[1].RecordBatches) == 0 {
		t.Fatalf("fetch: old partition code %d, other code %d with %d bytes", ps[0].ErrorCode, ps[1].ErrorCode, len(ps[1].RecordBatches))
	}
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "legacy"
	lt.Partitions = append(lt.Partitions, kmsg.NewListOffsetsRequestTopicPartition())
	lo.Topics = append(lo.Topics, lt)
	if r := rc.do(lo, 4).(*kmsg.ListOffsetsResponse).Topics[0].Partitions[0]; r.ErrorCode != errKafkaStorage {
		t.Fatalf("list offsets: %+v", r)
	}
	commit := kmsg.NewPtrOffsetCommitRequest()
	commit.Group, commit.Generation = "g", -1
	commit.Topics = []kmsg.OffsetCommitRequestTopic{{Topic: "legacy", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 1}}}}
	if cr := rc.do(commit, 3).(*kmsg.OffsetCommitResponse); cr.Topics[0].Partitions[0].ErrorCode != errKafkaStorage {
		t.Fatalf("commit: %+v", cr)
	}
	r, err := n.st.GetMessage("legacy", 0, 0, 1, 1<<20, nil)
	if err != nil || r.Status != store.Found || record.Envelope(r.Records[0]).Messages() != 3 {
		t.Fatalf("the store no longer reads the old batch: %v %v", err, r)
	}
	r.Release()
}
