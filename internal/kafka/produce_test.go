package kafka

import (
	"bufio"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func produceReq(acks int16, topic string, batch []byte) *kmsg.ProduceRequest {
	p := kmsg.NewPtrProduceRequest()
	p.Acks, p.TimeoutMillis = acks, 5000
	pt := kmsg.NewProduceRequestTopic()
	pt.Topic = topic
	pp := kmsg.NewProduceRequestTopicPartition()
	pp.Records = batch
	pt.Partitions = append(pt.Partitions, pp)
	p.Topics = append(p.Topics, pt)
	return p
}

// TestProduceAcks: acks=0 gets no response (the next request's answer
// comes first), acks=1 and acks=-1 answer base offsets that follow each
// other, a batch with a bad CRC is refused with CORRUPT_MESSAGE and not
// stored, acks=2 is refused, and so is a record batch in Produce v2.
func TestProduceAcks(t *testing.T) {
	n := startNode(t, nil)
	c, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	send := func(req kmsg.Request, v int16, corr int32) *kmsg.ProduceResponse {
		c.Write(frameOf(req, v, corr))
		if p, ok := req.(*kmsg.ProduceRequest); ok && p.Acks == 0 {
			return nil
		}
		body := readResponse(t, r, corr)
		resp := kmsg.NewPtrProduceResponse()
		resp.SetVersion(v)
		if resp.IsFlexible() {
			body = body[1:] // the response header's tags
		}
		if err := resp.ReadFrom(body); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	send(produceReq(0, "acks", testBatch(2, 0)), 9, 1)
	got := send(produceReq(1, "acks", testBatch(3, 0)), 9, 2).Topics[0].Partitions[0]
	if got.ErrorCode != 0 || got.BaseOffset != 2 {
		t.Fatalf("acks=1 after acks=0: %+v", got)
	}
	got = send(produceReq(-1, "acks", testBatch(1, 0)), 9, 3).Topics[0].Partitions[0]
	if got.ErrorCode != 0 || got.BaseOffset != 5 {
		t.Fatalf("acks=-1: %+v", got)
	}
	// acks=-1 is answered once the batch is visible: a consumer told its
	// offset finds it below the high watermark at once.
	if entries := n.st.MaxOffset("acks", 0); entries != 6 { // 2 + 3 + 1 records, one entry each
		t.Fatalf("after the acks=-1 answer %d entries visible, want 6", entries)
	}
	bad := testBatch(2, 0)
	bad[len(bad)-1] ^= 0xff
	got = send(produceReq(-1, "acks", bad), 9, 4).Topics[0].Partitions[0]
	if got.ErrorCode != errCorruptMessage || got.BaseOffset != -1 {
		t.Fatalf("bad CRC: %+v", got)
	}
	got = send(produceReq(2, "acks", testBatch(1, 0)), 9, 5).Topics[0].Partitions[0]
	if got.ErrorCode != errInvalidRequiredAcks {
		t.Fatalf("acks=2: %+v", got)
	}
	// Produce v2 carries a message set of magic 0/1: a record batch
	// (magic 2) there is refused (TestSaramaOldMessageFormats: what v0-2
	// do carry is stored).
	got = send(produceReq(-1, "acks", testBatch(1, 0)), 2, 6).Topics[0].Partitions[0]
	if got.ErrorCode != errCorruptMessage {
		t.Fatalf("Produce v2 with a magic 2 batch: %+v", got)
	}
	if entries := n.st.MaxOffset("acks", 0); entries != 6 {
		t.Fatalf("%d entries stored, want the 6 of the 3 batches", entries)
	}
}

// TestCoreErrorsMapped: every kind of the core's errors has a Kafka code
// other than success.
func TestCoreErrorsMapped(t *testing.T) {
	for _, k := range core.Kinds {
		if coreCode(core.Errorf(k, "x")) == errNone {
			t.Errorf("%v maps to success", k)
		}
	}
}

// Fetch's MaxBytes bounds the whole response: once it is reached, the
// partitions after are answered with their offsets and no records (only
// the first batch of a response may exceed the limits).
func TestFetchMaxBytesBoundsTheResponse(t *testing.T) {
	n := startNode(t, nil)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "wide"); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for p := int32(0); p < 3; p++ {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "wide", Partition: p, Value: make([]byte, 10_000)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	req := kmsg.NewPtrFetchRequest()
	req.SetVersion(12)
	req.MaxBytes = 15_000
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = "wide"
	for p := int32(0); p < 3; p++ {
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.Partition, rp.PartitionMaxBytes = p, 1<<20
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	resp := n.srv.fetch(req).(*kmsg.FetchResponse)
	total, withData := 0, 0
	for _, rp := range resp.Topics[0].Partitions {
		if rp.ErrorCode != 0 || rp.HighWatermark != 1 {
			t.Fatalf("partition %d: error %d, high watermark %d", rp.Partition, rp.ErrorCode, rp.HighWatermark)
		}
		total += len(rp.RecordBatches)
		if len(rp.RecordBatches) > 0 {
			withData++
		}
	}
	if withData != 2 || total > int(req.MaxBytes)+12_000 {
		t.Fatalf("MaxBytes %d: %d bytes from %d partitions, want the first two batches (the second crosses the limit) and none after", req.MaxBytes, total, withData)
	}
}
