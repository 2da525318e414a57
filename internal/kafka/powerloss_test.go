package kafka

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPowerLossKeepsAcksAll: franz-go produces with acks=all (snappy)
// while the machine loses power (the MemFS keeps only what an fdatasync
// covered, tearing the rest at random); after a restart on what survived,
// every record acknowledged before the power loss is there at the offset
// it was acknowledged with, and the partition's offsets are dense.
func TestPowerLossKeepsAcksAll(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("KEEL_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (rerun with KEEL_SEED)", seed)
	n := startNode(t, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.AllowAutoTopicCreation(),
		kgo.ProducerBatchCompression(kgo.SnappyCompression()), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := map[int64]string{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				v := fmt.Sprintf("w%d-%d", w, i)
				r := cl.ProduceSync(ctx, &kgo.Record{Topic: "power", Partition: 0, Value: []byte(v)})
				if r.FirstErr() == nil {
					mu.Lock()
					acked[r[0].Record.Offset] = v
					mu.Unlock()
				}
			}
		}()
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		k := len(acked)
		mu.Unlock()
		if k >= 300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d records acknowledged", k)
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	before := make(map[int64]string, len(acked))
	for o, v := range acked {
		before[o] = v
	}
	mu.Unlock()
	survived := n.fs.CrashCloneWith(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))
	cancel()
	wg.Wait()
	cl.Close()
	n.stop()

	n2 := startNode(t, survived)
	var last int64
	for o := range before {
		last = max(last, o)
	}
	hwm := latestOffset(t, n2.addr, "power", 0)
	if hwm <= last {
		t.Fatalf("after the power loss the partition ends at %d: acknowledged offsets up to %d lost", hwm, last)
	}
	got := consumeN(t, n2.addr, "power", 0, 0, int(hwm))
	for i, r := range got {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d: offsets not dense after the power loss", i, r.Offset)
		}
	}
	for o, v := range before {
		if o >= int64(len(got)) || string(got[o].Value) != v {
			t.Fatalf("acknowledged record %q at offset %d lost after the power loss (%d records survived)", v, o, len(got))
		}
	}
	t.Logf("%d acknowledged before the power loss, %d records survived", len(before), len(got))
}

// latestOffset asks the broker at addr for the partition's high watermark.
func latestOffset(t *testing.T, addr, topic string, p int32) int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewListOffsetsRequestTopicPartition()
	rp.Partition, rp.Timestamp = p, -1
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(context.Background(), cl)
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("list offsets: %v %+v", err, resp)
	}
	return resp.Topics[0].Partitions[0].Offset
}
