package kafka

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"runtime"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/translate"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cleanTestBatch is a batch of records k0..k<n-1> at offsets base.., record 2 a
// tombstone, compressed with codec.
func cleanTestBatch(t *testing.T, base int64, n int, codec int) []byte {
	t.Helper()
	var rs []translate.KafkaRecord
	for i := range n {
		r := translate.KafkaRecord{Offset: base + int64(i), Timestamp: 1000 + int64(i), Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)}
		if i == 2 {
			r.Value = nil
		}
		rs = append(rs, r)
	}
	b := translate.AppendKafkaBatch(nil, rs)
	if codec != translate.CodecNone {
		var err error
		if b, err = translate.RecompressKafkaBatch(b, codec, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// TestFilterBatch: a batch losing records keeps its header (base offset,
// last offset delta, codec, timestamps) and the survivors as they were,
// with recordsCount, length and CRC recomputed; one losing none is kept
// byte for byte, one losing all is dropped, a control batch is kept whole.
func TestFilterBatch(t *testing.T) {
	for _, codec := range []int{translate.CodecNone, translate.CodecGzip, translate.CodecSnappy, translate.CodecLZ4, translate.CodecZstd} {
		b := cleanTestBatch(t, 100, 5, codec)
		out, err := filterBatch(b, 1<<20, func(r cleanRecord) bool { return r.offset == 101 || r.offset == 102 || r.offset == 104 })
		if err != nil {
			t.Fatal(err)
		}
		h, err := parseBatchHeader(out)
		if err != nil {
			t.Fatalf("codec %d: %v", codec, err)
		}
		if h.baseOffset != 100 || h.lastOffsetDelta != 4 || h.records != 3 || translate.KafkaBatchCodec(out) != codec ||
			binary.BigEndian.Uint64(out[27:]) != binary.BigEndian.Uint64(b[27:]) || binary.BigEndian.Uint64(out[35:]) != binary.BigEndian.Uint64(b[35:]) {
			t.Fatalf("codec %d: header %+v codec %d", codec, h, translate.KafkaBatchCodec(out))
		}
		var got []string
		err = translate.EachKafkaRecord(out, 1<<20, func(r *translate.KafkaRecord) error {
			got = append(got, fmt.Sprintf("%d:%s=%s:%d:%v", r.Offset, r.Key, r.Value, r.Timestamp, r.Value == nil))
			return nil
		})
		if err != nil || fmt.Sprint(got) != "[101:k1=v1:1001:false 102:k2=:1002:true 104:k4=v4:1004:false]" {
			t.Fatalf("codec %d: %v %v", codec, got, err)
		}
		if same, err := filterBatch(b, 1<<20, func(cleanRecord) bool { return true }); err != nil || &same[0] != &b[0] || len(same) != len(b) {
			t.Fatalf("codec %d: a batch losing nothing was rewritten (%v)", codec, err)
		}
		if none, err := filterBatch(b, 1<<20, func(cleanRecord) bool { return false }); err != nil || none != nil {
			t.Fatalf("codec %d: a batch losing everything: %d bytes %v", codec, len(none), err)
		}
	}
	ctl := cleanTestBatch(t, 7, 1, translate.CodecNone)
	binary.BigEndian.PutUint16(ctl[21:], attrControl)
	binary.BigEndian.PutUint32(ctl[17:], crc32.Checksum(ctl[21:], castagnoli))
	if out, err := filterBatch(ctl, 1<<20, func(cleanRecord) bool { return false }); err != nil || len(out) != len(ctl) {
		t.Fatalf("a control batch: %d bytes %v, want kept whole", len(out), err)
	}
	if _, err := filterBatch(ctl[:len(ctl)-1], 1<<20, func(cleanRecord) bool { return true }); err == nil {
		t.Fatal("a cut batch was cleaned")
	}
}

// TestCompactLagAndRetention: min.compaction.lag.ms keeps young batches
// uncleaned; with compact,delete, retention.ms drops the copy's oldest
// batches and moves the log start past them.
func TestCompactLagAndRetention(t *testing.T) {
	n := compactNode(t, nil, time.Hour)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact,delete"),
		"min.compaction.lag.ms": kmsg.StringPtr("3600000"), "retention.ms": kmsg.StringPtr("7200000"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0")}, "lag"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	now := time.Now()
	old := &kgo.Record{Topic: "lag", Key: []byte("old"), Value: []byte("x"), Timestamp: now.Add(-90 * time.Minute)}
	if err := cl.ProduceSync(ctx, old).FirstErr(); err != nil {
		t.Fatal(err)
	}
	young := &kgo.Record{Topic: "lag", Key: []byte("young"), Value: []byte("y"), Timestamp: now}
	if err := cl.ProduceSync(ctx, young).FirstErr(); err != nil {
		t.Fatal(err)
	}
	x := n.srv.compact
	if err := x.clean("lag", 0); err != nil {
		t.Fatal(err)
	}
	p := x.lookup(queueKey{"lag", 0})
	if p == nil || p.cp == nil || p.cp.cleaned != 1 {
		t.Fatalf("with min.compaction.lag.ms 1 h: %+v, want only the 90-minute-old batch cleaned", p)
	}
	x.skewMs.Store(int64(2 * time.Hour / time.Millisecond)) // the young one is 2 h old, the old one 3.5 h: past retention.ms
	if err := x.clean("lag", 0); err != nil {
		t.Fatal(err)
	}
	start, hwm, err := n.srv.partitionBounds("lag", n.srv.parts.get("lag", 0))
	if err != nil || start != 1 || hwm != 2 || p.cp.cleaned != 2 {
		t.Fatalf("after retention: log start %d, high watermark %d, cleaned %d (%v); want 1, 2, 2", start, hwm, p.cp.cleaned, err)
	}
	if got := readLatest(t, n, "lag"); len(got) != 1 || got["young"] != "y" {
		t.Fatalf("read %v, want only the young record", got)
	}
}

// TestCompactCopyOfDeletedTopic: a topic deleted and made again through
// another door (the core's RocketMQ side) while the door runs: its old
// copy is not served from the deletion on (KAFKA_STORAGE_ERROR), and the
// next round removes it, after which the new topic's records are read.
func TestCompactCopyOfDeletedTopic(t *testing.T) {
	n := compactNode(t, nil, time.Hour)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, "again"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	produce := func(prefix string, n int) {
		for i := range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "again", Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%s-%d", prefix, i)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce("old", 3)
	x := n.srv.compact
	if err := x.clean("again", 0); err != nil {
		t.Fatal(err)
	}
	tc, _ := n.core.Topic("again")
	if err := n.core.DeleteTopic("again"); err != nil { // the RocketMQ side
		t.Fatal(err)
	}
	if err := n.core.UpdateKafkaTopic(tc); err != nil {
		t.Fatal(err)
	}
	produce("new", 5) // more records than the old copy covered
	var rp kmsg.FetchResponseTopicPartition
	n.srv.fetchPartition("again", kmsg.FetchRequestTopicPartition{Partition: 0, FetchOffset: 0, PartitionMaxBytes: 1 << 20}, 1<<20, false, &rp)
	if rp.ErrorCode != errKafkaStorage {
		t.Fatalf("fetch of a deleted topic's copy: error %d with %d bytes, want KAFKA_STORAGE_ERROR", rp.ErrorCode, len(rp.RecordBatches))
	}
	x.round(func() bool { return false })
	got := readLatest(t, n, "again")
	if len(got) != 5 || got["k0"] != "new-0" || got["k4"] != "new-4" {
		t.Fatalf("after the round: %v, want the new topic's 5 records", got)
	}
}

// TestCompactCopyOfTopicMadeAgainWhileDown: a copy left by a topic deleted
// and made again under its name while the door was down is never served,
// whether the new partition holds fewer offsets than the copy covers or
// more (its first entry locates another record than the copy began at):
// the partition answers KAFKA_STORAGE_ERROR.
func TestCompactCopyOfTopicMadeAgainWhileDown(t *testing.T) {
	for _, records := range []int{1, 8} {
		t.Run(fmt.Sprint(records), func(t *testing.T) { copyOfTopicMadeAgain(t, records) })
	}
}

func copyOfTopicMadeAgain(t *testing.T, records int) {
	fs := vfs.NewMem()
	n := compactNode(t, fs, time.Hour)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, "again"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	for i := range 5 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "again", Key: []byte("k"), Value: fmt.Appendf(nil, "old-%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.srv.compact.clean("again", 0); err != nil {
		t.Fatal(err)
	}
	n.stop()
	// The door down (a node without compaction): the topic made again.
	d := startNodeWith(t, fs, Config{})
	tc, _ := d.core.Topic("again")
	if err := d.core.DeleteTopic("again"); err != nil {
		t.Fatal(err)
	}
	if err := d.core.UpdateKafkaTopic(tc); err != nil {
		t.Fatal(err)
	}
	dc, _ := adminClient(t, d.addr)
	for range records {
		if err := dc.ProduceSync(ctx, &kgo.Record{Topic: "again", Key: []byte("k"), Value: []byte("new")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	d.stop()
	n = compactNode(t, fs, time.Hour)
	if err := n.srv.compact.clean("again", 0); err != nil {
		t.Fatal(err)
	}
	var rp kmsg.FetchResponseTopicPartition
	n.srv.fetchPartition("again", kmsg.FetchRequestTopicPartition{Partition: 0, FetchOffset: 0, PartitionMaxBytes: 1 << 20}, 1<<20, false, &rp)
	if rp.ErrorCode != errKafkaStorage {
		t.Fatalf("fetch of a partition of %d records under a copy of 5: error %d with %d bytes, want KAFKA_STORAGE_ERROR", records, rp.ErrorCode, len(rp.RecordBatches))
	}
}

// TestCompactCleansOnlyDurable: under ASYNC_FLUSH the cleaner leaves
// records not yet flushed alone (a power loss could take them and their
// offsets be given to others).
func TestCompactCleansOnlyDurable(t *testing.T) {
	fs := vfs.NewMem()
	n := startNodeStore(t, fs, Config{DataDir: "/data", FS: fs, CompactionInterval: time.Hour}, func(c *store.Config) {
		c.FlushDiskType, c.FlushInterval = store.AsyncFlush, time.Hour
	})
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, "async"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	flushed := n.st.Offset(store.Flushed)
	for i := range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "async", Key: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if n.st.Offset(store.Flushed) != flushed {
		t.Skip("the store flushed meanwhile")
	}
	if err := n.srv.compact.clean("async", 0); err != nil {
		t.Fatal(err)
	}
	if p := n.srv.compact.lookup(queueKey{"async", 0}); p != nil && p.cp != nil {
		t.Fatalf("records not flushed were cleaned (copy to %d)", p.cp.cleaned)
	}
}

// TestCompactDirtyRatioAndMaxLag: a partition whose uncleaned bytes are
// below min.cleanable.dirty.ratio of the whole is left alone, until its
// oldest uncleaned batch is older than max.compaction.lag.ms.
func TestCompactDirtyRatioAndMaxLag(t *testing.T) {
	n := compactNode(t, nil, time.Hour)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0.9"), "max.compaction.lag.ms": kmsg.StringPtr("600000")}, "ratio"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	produce := func(keys int, prefix string) {
		var rs []*kgo.Record
		for k := range keys {
			rs = append(rs, &kgo.Record{Topic: "ratio", Key: fmt.Appendf(nil, "k%d", k), Value: fmt.Appendf(nil, "%s%d", prefix, k)})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	x := n.srv.compact
	cleaned := func() int64 {
		p := x.lookup(queueKey{"ratio", 0})
		if p == nil || p.cp == nil {
			return -1
		}
		return p.cp.cleaned
	}
	produce(50, "a")
	if err := x.clean("ratio", 0); err != nil || cleaned() != 50 {
		t.Fatalf("first pass: cleaned %d %v, want 50 (a first pass needs no ratio)", cleaned(), err)
	}
	produce(2, "b") // a few bytes against the copy's
	if err := x.clean("ratio", 0); err != nil || cleaned() != 50 {
		t.Fatalf("below the dirty ratio: cleaned %d %v, want 50 (left alone)", cleaned(), err)
	}
	x.skewMs.Store(600001) // the uncleaned batch is now older than max.compaction.lag.ms
	if err := x.clean("ratio", 0); err != nil || cleaned() != 52 {
		t.Fatalf("past max.compaction.lag.ms: cleaned %d %v, want 52", cleaned(), err)
	}
}

// TestCompactPassMemoryFollowsDirty: a pass over a copy of many keys and a
// few new records does not hold the copy's keys: it makes far fewer
// allocations than the copy has keys (it used to map every key of the
// partition, one allocation and map entry each, so a pass's memory grew
// with the partition's keys, not with the records it cleaned).
func TestCompactPassMemoryFollowsDirty(t *testing.T) {
	n := compactNode(t, nil, time.Hour)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0")}, "wide"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	const keys, keyLen = 20_000, 512
	key := func(i int) []byte { return append(fmt.Appendf(nil, "%08d-", i), make([]byte, keyLen-9)...) }
	for i := 0; i < keys; i += 500 {
		rs := make([]*kgo.Record, 0, 500)
		for j := i; j < i+500; j++ {
			rs = append(rs, &kgo.Record{Topic: "wide", Key: key(j), Value: []byte("v")})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	x := n.srv.compact
	if err := x.clean("wide", 0); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "wide", Key: key(7), Value: []byte("w")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := x.clean("wide", 0); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if p := x.lookup(queueKey{"wide", 0}); p == nil || p.cp == nil || p.cp.cleaned != keys+1 {
		t.Fatalf("the second pass did not clean the new record: %+v", p)
	}
	if got := after.Mallocs - before.Mallocs; got > keys/4 {
		t.Fatalf("a pass over %d kept keys and 1 new record made %d allocations", keys, got)
	}
	got := readLatest(t, n, "wide")
	if len(got) != keys || got[string(key(7))] != "w" || got[string(key(8))] != "v" {
		t.Fatalf("read %d keys (key 7 %q, key 8 %q), want %d with key 7 rewritten", len(got), got[string(key(7))], got[string(key(8))], keys)
	}
}
