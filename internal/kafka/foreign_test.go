package kafka

import (
	"context"
	"fmt"
	"hash/crc32"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// putRocketMQ stores n RocketMQ messages in queue 0 of topic, as the
// RocketMQ door does, and waits until they are visible.
func putRocketMQ(t *testing.T, st *store.Store, topic string, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		m := &message.Message{Topic: topic, QueueID: 0, BornTimestamp: 1_700_000_000_000 + int64(i), Body: fmt.Appendf(nil, "rmq-%d", i),
			BornHost: netip.MustParseAddrPort("127.0.0.1:1"), StoreHost: netip.MustParseAddrPort("127.0.0.1:2"),
			Properties: message.EncodeProperties(map[string]string{"KEYS": fmt.Sprint("key-", i), "TAGS": "TagA", "color": "red"})}
		if r := st.PutMessages(context.Background(), []*message.Message{m}); !r.OK() {
			t.Fatalf("put: %v %v", r.Status, r.Err)
		}
	}
	waitEntries(t, st, topic, int64(from+n))
}

func waitEntries(t *testing.T, st *store.Store, topic string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st.MaxOffset(topic, 0) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d entries, want %d", topic, st.MaxOffset(topic, 0), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFetchConvertsOtherProtocols: franz-go consumes a partition that
// RocketMQ producers (and an AMQP publisher) wrote: one record per entry
// at its queue offset, KEYS as key, properties as headers, the born time
// as timestamp; a Kafka producer writing on continues the offsets after
// them, and a consumer from the start reads both, densely, in order.
func TestFetchConvertsOtherProtocols(t *testing.T) {
	n := startNode(t, nil)
	if _, err := n.core.EnsureTopic("mixed", 1, 6); err != nil {
		t.Fatal(err)
	}
	putRocketMQ(t, n.st, "mixed", 0, 5)
	amqp := []byte{0, 2, 'r', 'k', 0, 0, 0, 0}
	amqp = append(amqp, "from-amqp"...)
	rec, err := record.AppendEnvelope(nil, record.AMQP, 1, []record.Dest{{Topic: "mixed", QueueID: 0}}, amqp)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := n.st.PutRecord(context.Background(), rec); !r.OK() {
		t.Fatal(r.Status, r.Err)
	}
	waitEntries(t, n.st, "mixed", 6)
	got := consumeN(t, n.addr, "mixed", 0, 0, 6)
	for i, r := range got[:5] {
		h := map[string]string{}
		for _, x := range r.Headers {
			h[x.Key] = string(x.Value)
		}
		if r.Offset != int64(i) || string(r.Key) != fmt.Sprint("key-", i) || string(r.Value) != fmt.Sprint("rmq-", i) ||
			r.Timestamp.UnixMilli() != 1_700_000_000_000+int64(i) || h["TAGS"] != "TagA" || h["color"] != "red" {
			t.Errorf("record %d: offset %d key %q value %q ts %v headers %q", i, r.Offset, r.Key, r.Value, r.Timestamp, h)
		}
	}
	if got[5].Offset != 5 || string(got[5].Value) != "from-amqp" {
		t.Errorf("AMQP message: offset %d value %q", got[5].Offset, got[5].Value)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	offs := produceAll(t, cl, "mixed", 0, 3, "kafka")
	if offs[0] != 6 {
		t.Fatalf("the Kafka batch after six entries got offsets %v", offs)
	}
	all := consumeN(t, n.addr, "mixed", 0, 0, 9)
	for i, r := range all {
		if r.Offset != int64(i) {
			t.Fatalf("record %d at offset %d (%q)", i, r.Offset, r.Value)
		}
	}
	if string(all[8].Value) != "kafka-2" {
		t.Errorf("last record %q", all[8].Value)
	}
	// From the middle of the converted entries.
	if mid := consumeN(t, n.addr, "mixed", 0, 3, 1); mid[0].Offset != 3 || string(mid[0].Value) != "rmq-3" {
		t.Errorf("from offset 3: %d %q", mid[0].Offset, mid[0].Value)
	}
}

// TestListOffsetsOverOtherProtocols: earliest, latest and by-time offsets
// of a partition RocketMQ producers wrote are its queue offsets; by time,
// a message counts with the timestamp a Kafka consumer sees on it (its
// born timestamp: putRocketMQ gives message i 1_700_000_000_000 + i).
func TestListOffsetsOverOtherProtocols(t *testing.T) {
	n := startNode(t, nil)
	if _, err := n.core.EnsureTopic("rmq", 1, 6); err != nil {
		t.Fatal(err)
	}
	putRocketMQ(t, n.st, "rmq", 0, 5)
	const mid = 1_700_000_000_003
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	list := func(ts int64) (int64, int16) {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "rmq"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		return p.Offset, p.ErrorCode
	}
	for _, c := range []struct {
		ts   int64
		want int64
	}{{-2, 0}, {-1, 5}, {mid, 3}, {0, 0}, {mid + 60_000, 5}} {
		if got, code := list(c.ts); got != c.want || code != 0 {
			t.Errorf("timestamp %d: offset %d (code %d), want %d", c.ts, got, code, c.want)
		}
	}
}

// TestKcatReadsOtherProtocols: librdkafka (kcat, CRC checks on) consumes a
// partition RocketMQ producers wrote: offsets, keys, values, headers.
func TestKcatReadsOtherProtocols(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat is not installed (apt-get install kcat): librdkafka not tested on converted records")
	}
	n := startNode(t, nil)
	if _, err := n.core.EnsureTopic("rmq-kcat", 1, 6); err != nil {
		t.Fatal(err)
	}
	putRocketMQ(t, n.st, "rmq-kcat", 0, 5)
	out, _ := kcat(t, "", "-C", "-b", n.addr, "-t", "rmq-kcat", "-p", "0", "-o", "beginning", "-e", "-X", "check.crcs=true",
		"-f", "%o %k %s %h\n")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 {
		t.Fatalf("kcat read %d records:\n%s", len(lines), out)
	}
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) != 4 || f[0] != fmt.Sprint(i) || f[1] != fmt.Sprint("key-", i) || f[2] != fmt.Sprint("rmq-", i) ||
			!strings.Contains(f[3], "TAGS=TagA") || !strings.Contains(f[3], "color=red") {
			t.Errorf("record %d: %q", i, l)
		}
	}
}

// TestFetchGroupsConvertedRecords: consecutive entries of other protocols
// come as one batch (CRC-32C right), and a small partition max bytes
// splits them across fetches without losing or repeating one.
func TestFetchGroupsConvertedRecords(t *testing.T) {
	n := startNode(t, nil)
	if _, err := n.core.EnsureTopic("grouped", 1, 6); err != nil {
		t.Fatal(err)
	}
	putRocketMQ(t, n.st, "grouped", 0, 10)
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	fetch := func(off int64, maxBytes int32) []kmsg.RecordBatch {
		req := kmsg.NewPtrFetchRequest()
		req.Version, req.MaxBytes = 11, 1<<20
		rt := kmsg.NewFetchRequestTopic()
		rt.Topic = "grouped"
		rp := kmsg.NewFetchRequestTopicPartition()
		rp.FetchOffset, rp.PartitionMaxBytes = off, maxBytes
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(context.Background(), cl)
		if err != nil {
			t.Fatal(err)
		}
		b := resp.Topics[0].Partitions[0].RecordBatches
		var out []kmsg.RecordBatch
		for len(b) > 0 {
			var rb kmsg.RecordBatch
			if err := rb.ReadFrom(b); err != nil {
				t.Fatal(err)
			}
			size := 12 + int(rb.Length)
			if got := crc32.Checksum(b[21:size], crc32.MakeTable(crc32.Castagnoli)); got != uint32(rb.CRC) {
				t.Fatalf("batch at %d: CRC %#x, bytes give %#x", rb.FirstOffset, uint32(rb.CRC), got)
			}
			out = append(out, rb)
			b = b[size:]
		}
		return out
	}
	if bs := fetch(0, 1<<20); len(bs) != 1 || bs[0].FirstOffset != 0 || bs[0].NumRecords != 10 || bs[0].LastOffsetDelta != 9 {
		t.Fatalf("batches %+v, want one of 10 records", bs)
	}
	next, fetches := int64(0), 0
	for next < 10 {
		bs := fetch(next, 150)
		if len(bs) == 0 || bs[0].FirstOffset != next {
			t.Fatalf("fetch at %d: %+v", next, bs)
		}
		for _, b := range bs {
			next = b.FirstOffset + int64(b.LastOffsetDelta) + 1
		}
		fetches++
	}
	if fetches < 3 {
		t.Errorf("%d fetches of 150 bytes for 10 records", fetches)
	}
}
