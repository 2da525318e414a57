package kafka

import (
	"crypto/rand"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// compactNode is a node whose door keeps compacted copies under /data and
// cleans every interval.
func compactNode(t *testing.T, fs *vfs.MemFS, interval time.Duration) *testNode {
	t.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	return startNodeWith(t, fs, Config{DataDir: "/data", FS: fs, CompactionInterval: interval})
}

// cleanedTo waits until partition (topic, q)'s copy covers the whole
// partition (its cleaned point is the high watermark) and a round ran
// after that.
func cleanedTo(t *testing.T, n *testNode, topic string, q int32) {
	t.Helper()
	hwm := n.st.MaxOffset(topic, q)
	waitUntil(t, "the cleaner to reach "+fmt.Sprint(hwm), func() bool {
		p := n.srv.compact.lookup(queueKey{topic, q})
		if p == nil {
			return false
		}
		p.mu.RLock()
		defer p.mu.RUnlock()
		return p.cp != nil && p.cp.cleaned == hwm
	})
}

// readAll consumes partition 0 of topic from the start to its high
// watermark with franz-go.
func readAll(t *testing.T, addr, topic string) []*kgo.Record {
	t.Helper()
	_, adm := adminClient(t, addr)
	ctx := ctx30(t)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	hwm := ends[topic][0].Offset
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond), kgo.FetchMaxBytes(4096), kgo.FetchMaxPartitionBytes(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) == 0 || got[len(got)-1].Offset < hwm-1 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d records, the last below %d: %v", len(got), hwm, err)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		got = append(got, fs.Records()...)
	}
	return got
}

// latestOf is what a reader from the start ends with: the last value read
// per key (nil for a tombstone), checking offsets rise.
func latestOf(t *testing.T, rs []*kgo.Record) (map[string][]byte, int) {
	t.Helper()
	out, gaps := map[string][]byte{}, 0
	for i, r := range rs {
		if i > 0 && r.Offset <= rs[i-1].Offset {
			t.Fatalf("offset %d after %d", r.Offset, rs[i-1].Offset)
		}
		if i > 0 && r.Offset > rs[i-1].Offset+1 {
			gaps++
		}
		out[string(r.Key)] = r.Value
	}
	return out, gaps
}

// TestKgoCompactedTopic: franz-go produces 10 versions of 40 keys and
// tombstones for 10 of them, in batches of 20 records, and a last record, to a compacted
// topic; once cleaned, a reader from the start gets exactly the latest
// record of every key (values and tombstones) at their original offsets,
// with gaps; a record without a key is refused with INVALID_RECORD; after
// delete.retention.ms the tombstones are gone too; a restart serves the
// same from the copy.
func TestKgoCompactedTopic(t *testing.T) {
	fs := vfs.NewMem()
	n := compactNode(t, fs, 10*time.Millisecond)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact"),
		"delete.retention.ms": kmsg.StringPtr("3600000"), "min.cleanable.dirty.ratio": kmsg.StringPtr("0")}, "cmp")
	if err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	want := map[string][]byte{}
	var offsets = map[string]int64{}
	for v := range 10 {
		for half := range 2 {
			var rs []*kgo.Record
			for k := half * 20; k < half*20+20; k++ {
				key := fmt.Sprintf("k%02d", k)
				val := fmt.Appendf(nil, "v%d-%s", v, key)
				rs = append(rs, &kgo.Record{Topic: "cmp", Key: []byte(key), Value: val})
				want[key] = val
			}
			res := cl.ProduceSync(ctx, rs...)
			if err := res.FirstErr(); err != nil {
				t.Fatal(err)
			}
			for _, pr := range res {
				offsets[string(pr.Record.Key)] = pr.Record.Offset
			}
		}
	}
	var tomb []*kgo.Record
	for k := range 10 {
		key := fmt.Sprintf("k%02d", k*4)
		tomb = append(tomb, &kgo.Record{Topic: "cmp", Key: []byte(key)})
		want[key] = nil
	}
	// The last record lives on, so that a reader knows it read the whole
	// partition once it read it.
	tomb = append(tomb, &kgo.Record{Topic: "cmp", Key: []byte("zz"), Value: []byte("end")})
	want["zz"] = []byte("end")
	res := cl.ProduceSync(ctx, tomb...)
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, pr := range res {
		offsets[string(pr.Record.Key)] = pr.Record.Offset
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "cmp", Value: []byte("no key")}).FirstErr(); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a record without a key: %v, want INVALID_RECORD", err)
	}

	cleanedTo(t, n, "cmp", 0)
	got := readAll(t, n.addr, "cmp")
	latest, gaps := latestOf(t, got)
	if len(got) != len(want) || gaps == 0 {
		t.Fatalf("read %d records with %d gaps, want the %d latest with gaps", len(got), gaps, len(want))
	}
	for _, r := range got {
		if w := want[string(r.Key)]; string(r.Value) != string(w) || (w == nil) != (r.Value == nil) || r.Offset != offsets[string(r.Key)] {
			t.Fatalf("key %s: %q at %d, want %q at %d", r.Key, r.Value, r.Offset, w, offsets[string(r.Key)])
		}
	}
	if len(latest) != len(want) {
		t.Fatalf("%d keys, want %d", len(latest), len(want))
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, "cmp")
	if err != nil {
		t.Fatal(err)
	}
	c, err := rcs.On("cmp", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range c.Configs {
		if e.Key == "cleanup.policy" && (e.MaybeValue() != "compact" || e.Source != kmsg.ConfigSourceDynamicTopicConfig) {
			t.Fatalf("cleanup.policy described as %q from %v", e.MaybeValue(), e.Source)
		}
	}

	// The tombstones' time comes: the next pass removes them.
	passes := n.srv.compact.passes.Load()
	n.srv.compact.skewMs.Store(3600001)
	waitUntil(t, "a pass removing the tombstones", func() bool { return n.srv.compact.passes.Load() > passes })
	got = readAll(t, n.addr, "cmp")
	for _, r := range got {
		if r.Value == nil {
			t.Fatalf("tombstone of %s at %d still read after delete.retention.ms", r.Key, r.Offset)
		}
	}
	if len(got) != 31 {
		t.Fatalf("%d records after the tombstones went, want 31", len(got))
	}

	// A restart serves the copy as it was.
	n.stop()
	n2 := compactNode(t, fs, time.Hour)
	again := readAll(t, n2.addr, "cmp")
	if len(again) != len(got) {
		t.Fatalf("after a restart %d records, before %d", len(again), len(got))
	}
	for i := range again {
		if again[i].Offset != got[i].Offset || string(again[i].Value) != string(got[i].Value) {
			t.Fatalf("after a restart record %d: %d %q, before %d %q", i, again[i].Offset, again[i].Value, got[i].Offset, got[i].Value)
		}
	}
	if err := ctx.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactPolicyConfigs: cleanup.policy is a list: IncrementalAlterConfigs
// APPEND and SUBTRACT move a topic between delete, compact,delete and
// compact (described as set), AlterConfigs sets it whole; Produce refuses
// records without a key exactly while the policy compacts.
func TestCompactPolicyConfigs(t *testing.T) {
	n := compactNode(t, nil, time.Hour)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "pol"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	policy := func() string {
		rcs, err := adm.DescribeTopicConfigs(ctx, "pol")
		if err != nil {
			t.Fatal(err)
		}
		c, err := rcs.On("pol", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range c.Configs {
			if e.Key == "cleanup.policy" {
				return e.MaybeValue()
			}
		}
		return ""
	}
	keyless := func() error {
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "pol", Value: []byte("no key")}).FirstErr()
	}
	incr := func(op kadm.IncrementalOp, v string) {
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: op, Name: "cleanup.policy", Value: kmsg.StringPtr(v)}}, "pol")
		if err != nil || rs[0].Err != nil {
			t.Fatalf("%v %s: %v %+v", op, v, err, rs)
		}
	}
	if err := keyless(); err != nil {
		t.Fatalf("a keyless record to a delete topic: %v", err)
	}
	incr(kadm.AppendConfig, "compact")
	if p := policy(); p != "delete,compact" {
		t.Fatalf("after APPEND compact: %q", p)
	}
	if err := keyless(); !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a keyless record to a delete,compact topic: %v, want INVALID_RECORD", err)
	}
	incr(kadm.SubtractConfig, "delete")
	if p := policy(); p != "compact" {
		t.Fatalf("after SUBTRACT delete: %q", p)
	}
	rs, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "cleanup.policy", Value: kmsg.StringPtr("delete")}}, "pol")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("AlterConfigs cleanup.policy=delete: %v %+v", err, rs)
	}
	if p := policy(); p != "delete" {
		t.Fatalf("after AlterConfigs delete: %q", p)
	}
	if err := keyless(); err != nil {
		t.Fatalf("a keyless record after the policy went back to delete: %v", err)
	}
}

// TestCompactedCopyOutlivesCommitLog: with the store's own age retention
// running (fileReservedTime 50 ms, 64 KiB segments), a compacted topic
// holds the CommitLog only from its cleaned point: once the whole
// partition is cleaned, every segment holding its records goes (its store
// start reaches its end) and a reader from the start still gets the
// latest record of every key, from the copy, the log start unchanged;
// ListOffsets by time finds records in the copy.
func TestCompactedCopyOutlivesCommitLog(t *testing.T) {
	fs := vfs.NewMem()
	n := startNodeStore(t, fs, Config{MaxBatchBytes: 8 << 10, RetentionMs: 50, DataDir: "/data", FS: fs, CompactionInterval: 10 * time.Millisecond},
		func(c *store.Config) {
			c.CommitLogSegmentBytes, c.MaxMessageBytes = 64<<10, 8<<10
			c.FileReservedTime, c.RetentionCheckInterval = 50*time.Millisecond, 20*time.Millisecond
			c.DeleteWhen = "00;01;02;03;04;05;06;07;08;09;10;11;12;13;14;15;16;17;18;19;20;21;22;23"
		})
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0")}, "cmpseg"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "other"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	want := map[string]string{}
	value := make([]byte, 3000)
	for v := range 6 {
		for k := range 10 {
			rand.Read(value)
			val := fmt.Sprintf("%d-%x", v, value)
			key := fmt.Sprintf("k%d", k)
			want[key] = val
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "cmpseg", Partition: 0, Key: []byte(key), Value: []byte(val)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	cleanedTo(t, n, "cmpseg", 0)
	noise := make([]byte, 4000)
	hwm := n.st.MaxOffset("cmpseg", 0)
	waitUntil(t, "the store to delete every segment of the compacted topic's records", func() bool {
		rand.Read(noise) // other traffic rolls the segments
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "other", Partition: 0, Value: noise}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return n.st.MinOffset("cmpseg", 0) == hwm
	})
	if got := readLatest(t, n, "cmpseg"); sameLatest(got, want) != nil {
		t.Fatalf("with the CommitLog below %d gone: %v", n.st.MinOffset("cmpseg", 0), sameLatest(got, want))
	}
	if got := earliest(t, adm, "cmpseg", 0); got != 0 {
		t.Fatalf("log start %d, want 0 (the copy's)", got)
	}
	// ListOffsets by time searches the copy: the first record at or
	// after a time before them all is the copy's first.
	first := readAll(t, n.addr, "cmpseg")[0]
	los, err := adm.ListOffsetsAfterMilli(ctx, time.Now().Add(-time.Hour).UnixMilli(), "cmpseg")
	if err != nil {
		t.Fatal(err)
	}
	if lo, ok := los.Lookup("cmpseg", 0); !ok || lo.Err != nil || lo.Offset != first.Offset || lo.Timestamp != first.Timestamp.UnixMilli() {
		t.Fatalf("by time: %+v, want the copy's first record, offset %d at %d", lo, first.Offset, first.Timestamp.UnixMilli())
	}
}

// TestCompactedTopicRefusesTransactions: a transactional producer cannot
// add a compacted topic's partition to its transaction (the cleaner keeps
// records whatever their transaction: an aborted one could outlive its
// marker), and a transactional batch sent there anyway is refused; the
// same producer's transaction on a plain topic commits.
func TestCompactedTopicRefusesTransactions(t *testing.T) {
	n := compactNode(t, nil, time.Hour)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, "cmp-txn")
	if err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	cl := txnProducer(t, n.addr, "txn-on-compacted")
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	err = cl.ProduceSync(ctx, &kgo.Record{Topic: "cmp-txn", Key: []byte("k"), Value: []byte("v")}).FirstErr()
	if !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("a transactional produce to a compacted topic: %v, want POLICY_VIOLATION", err)
	}
	if hwm := n.st.MaxOffset("cmp-txn", 0); hwm != 0 {
		t.Fatalf("the compacted topic holds %d records", hwm)
	}
	// franz-go takes POLICY_VIOLATION as fatal for its producer id: a
	// new producer of the same id goes on, on a plain topic.
	cl.Close()
	produceTxn(t, txnProducer(t, n.addr, "txn-on-compacted"), "plain-txn", 0, "p", 3, true)
	if got := consumeValues(t, n.addr, "plain-txn", 0, true, 3); len(got) != 3 {
		t.Fatalf("read_committed read %d records of the committed transaction", len(got))
	}
}
