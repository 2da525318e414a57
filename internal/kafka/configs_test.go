package kafka

import (
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// describeTopic returns the topic's configs by name, as kadm describes
// them (with synonyms).
func describeTopic(t *testing.T, adm *kadm.Client, topic string) map[string]kadm.Config {
	t.Helper()
	rcs, err := adm.DescribeTopicConfigs(ctx30(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		t.Fatalf("describe %s: %v %v", topic, err, rc.Err)
	}
	out := map[string]kadm.Config{}
	for _, c := range rc.Configs {
		out[c.Key] = c
	}
	return out
}

// TestTopicConfigsAcceptedAndDescribed: CreateTopics takes every topic
// config Kafka defines that Keel can honour or keep with a documented
// meaning; DescribeConfigs reports each set value as
// DYNAMIC_TOPIC_CONFIG with the broker's synonym behind it, the others
// with the broker's value and source; IncrementalAlterConfigs DELETE puts
// a config back to its default, AlterConfigs replaces the whole set, and
// list configs take APPEND.
func TestTopicConfigsAcceptedAndDescribed(t *testing.T) {
	n := startNode(t, nil)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	set := map[string]string{
		"retention.ms": "-1", "retention.bytes": "1073741824", "max.message.bytes": "100000",
		"message.timestamp.type": "LogAppendTime", "cleanup.policy": "delete", "compression.type": "producer",
		"segment.bytes": "1048576", "segment.ms": "3600000", "delete.retention.ms": "1000",
		"min.compaction.lag.ms": "5", "message.format.version": "2.8-IV1", "min.insync.replicas": "1",
		"file.delete.delay.ms": "1", "flush.messages": "1", "flush.ms": "10", "index.interval.bytes": "100",
		"preallocate": "true", "unclean.leader.election.enable": "true", "message.downconversion.enable": "true",
		"local.retention.ms": "1000", "local.retention.bytes": "-2", "segment.index.bytes": "4096",
		"min.cleanable.dirty.ratio": "0.25", "follower.replication.throttled.replicas": "*",
	}
	cfgs := map[string]*string{}
	for k, v := range set {
		cfgs[k] = kmsg.StringPtr(v)
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, cfgs, "all.cfg"); err != nil || r.Err != nil {
		t.Fatalf("create with every config: %v %v %s", err, r.Err, r.ErrMessage)
	}
	got := describeTopic(t, adm, "all.cfg")
	for k, v := range set {
		c := got[k]
		if c.MaybeValue() != v || c.Source != kmsg.ConfigSourceDynamicTopicConfig || len(c.Synonyms) == 0 || c.Synonyms[0].Source != kmsg.ConfigSourceDynamicTopicConfig {
			t.Errorf("%s: %+v, want %s set on the topic", k, c, v)
		}
	}
	if c := got["retention.ms"]; len(c.Synonyms) != 2 || c.Synonyms[1].Key != "log.retention.ms" || c.Synonyms[1].Value == nil || *c.Synonyms[1].Value != "259200000" || c.Synonyms[1].Source != kmsg.ConfigSourceStaticBrokerConfig {
		t.Errorf("retention.ms synonyms %+v, want the broker's log.retention.ms behind the topic's", c.Synonyms)
	}
	for k, want := range map[string]string{"segment.jitter.ms": "0", "message.timestamp.difference.max.ms": maxLong, "remote.storage.enable": "false"} {
		if c := got[k]; c.MaybeValue() != want || c.Source != kmsg.ConfigSourceDefaultConfig {
			t.Errorf("%s: %+v, want the default %s", k, c, want)
		}
	}

	incr := func(cs ...kadm.AlterConfig) error {
		rs, err := adm.AlterTopicConfigs(ctx, cs, "all.cfg")
		if err != nil {
			return err
		}
		return rs[0].Err
	}
	if err := incr(kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "retention.ms"}, kadm.AlterConfig{Op: kadm.AppendConfig, Name: "follower.replication.throttled.replicas", Value: kmsg.StringPtr("0:0")}); err != nil {
		t.Fatal(err)
	}
	got = describeTopic(t, adm, "all.cfg")
	if c := got["retention.ms"]; c.MaybeValue() != "259200000" || c.Source != kmsg.ConfigSourceStaticBrokerConfig {
		t.Errorf("retention.ms after DELETE: %+v, want the broker's", c)
	}
	if c := got["follower.replication.throttled.replicas"]; c.MaybeValue() != "*,0:0" {
		t.Errorf("list after APPEND: %+v", c)
	}
	if c := got["segment.ms"]; c.MaybeValue() != "3600000" {
		t.Errorf("incremental alter changed another config: %+v", c)
	}
	rs, err := adm.AlterTopicConfigsState(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: kmsg.StringPtr("5000")}}, "all.cfg")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("alter (replace): %v %+v", err, rs)
	}
	got = describeTopic(t, adm, "all.cfg")
	rb, ms, tt := got["retention.bytes"], got["segment.ms"], got["message.timestamp.type"]
	if rb.MaybeValue() != "5000" || ms.Source != kmsg.ConfigSourceDefaultConfig || tt.MaybeValue() != "CreateTime" {
		t.Errorf("after AlterConfigs: retention.bytes %+v, segment.ms %+v, message.timestamp.type %+v: want only retention.bytes set",
			got["retention.bytes"], got["segment.ms"], got["message.timestamp.type"])
	}

	brs, err := adm.DescribeBrokerConfigs(ctx, 0)
	if err != nil || brs[0].Err != nil {
		t.Fatalf("broker configs: %v %+v", err, brs)
	}
	bc := map[string]kadm.Config{}
	for _, c := range brs[0].Configs {
		bc[c.Key] = c
	}
	for k, want := range map[string]string{"log.retention.ms": "259200000", "message.max.bytes": "4194304", "log.retention.bytes": "-1", "log.cleanup.policy": "delete"} {
		if c := bc[k]; c.MaybeValue() != want {
			t.Errorf("broker %s: %+v, want %s", k, c, want)
		}
	}
	if bc["log.retention.ms"].Source != kmsg.ConfigSourceStaticBrokerConfig || bc["log.cleanup.policy"].Source != kmsg.ConfigSourceDefaultConfig {
		t.Errorf("broker sources: log.retention.ms %v, log.cleanup.policy %v", bc["log.retention.ms"].Source, bc["log.cleanup.policy"].Source)
	}
}

// TestTopicConfigRefusals: what Keel cannot honour, and what Kafka itself
// would refuse, is INVALID_CONFIG with a message naming the key; nothing
// of the request is applied.
func TestTopicConfigRefusals(t *testing.T) {
	n := startNode(t, nil)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "refuse"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	for _, c := range []struct{ name, value, says string }{
		{"cleanup.policy", "compact", "data directory"}, // this node's door has none
		{"cleanup.policy", "shred", "must be delete, compact or compact,delete"},
		{"cleanup.policy", "compact,compact", "must be delete, compact or compact,delete"},
		{"compression.type", "brotli", "must be one of"},
		{"min.insync.replicas", "2", "acks=all"},
		{"remote.storage.enable", "true", "tiered storage"},
		{"message.timestamp.type", "NoTimestamp", "CreateTime or LogAppendTime"},
		{"retention.ms", "-2", "at least -1"},
		{"retention.ms", "soon", "not a long"},
		{"segment.bytes", "10", "at least 14"},
		{"preallocate", "yes", "not true or false"},
		{"max.message.bytes", "1000000000", "the most this broker takes"},
		{"no.such.config", "1", "unknown"},
	} {
		r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{c.name: kmsg.StringPtr(c.value)}, "refused.at.create")
		if err == nil {
			err = r.Err
		}
		if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(r.ErrMessage, c.name) && c.name != "no.such.config" || !strings.Contains(r.ErrMessage, c.says) {
			t.Errorf("create with %s=%s: %v %q, want INVALID_CONFIG naming it and saying %q", c.name, c.value, err, r.ErrMessage, c.says)
		}
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: kmsg.StringPtr("77")}, {Name: c.name, Value: kmsg.StringPtr(c.value)}}, "refuse")
		if err == nil {
			err = rs[0].Err
		}
		if !errors.Is(err, kerr.InvalidConfig) || !strings.Contains(rs[0].ErrMessage, c.says) {
			t.Errorf("alter %s=%s: %v %+v", c.name, c.value, err, rs)
		}
	}
	if _, ok := n.core.Topic("refused.at.create"); ok {
		t.Error("a refused CreateTopics created its topic")
	}
	if got := describeTopic(t, adm, "refuse")["retention.bytes"]; got.Value == nil || *got.Value != "-1" {
		t.Errorf("a refused alter applied its other config: retention.bytes %+v", got)
	}
}

// retentionNode starts a node applying retention every 20 ms.
func retentionNode(t *testing.T) *testNode {
	return startNodeWith(t, nil, Config{RetentionCheckInterval: 20 * time.Millisecond})
}

// waitRounds waits until the door's retention task has done n rounds.
func waitRounds(t *testing.T, n *testNode, rounds uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.srv.retentionRounds.Load() < rounds {
		if time.Now().After(deadline) {
			t.Fatalf("retention did %d rounds in 10 s, want %d", n.srv.retentionRounds.Load(), rounds)
		}
		time.Sleep(time.Millisecond)
	}
}

// earliest is the partition's log start by ListOffsets.
func earliest(t *testing.T, adm *kadm.Client, topic string, p int32) int64 {
	t.Helper()
	os, err := adm.ListStartOffsets(ctx30(t), topic)
	if err != nil {
		t.Fatal(err)
	}
	o, ok := os.Lookup(topic, p)
	if !ok || o.Err != nil {
		t.Fatalf("start offset of %s/%d: %+v %v", topic, p, o, ok)
	}
	return o.Offset
}

// waitEarliest waits until the partition's log start is want.
func waitEarliest(t *testing.T, adm *kadm.Client, topic string, p int32, want int64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := earliest(t, adm, topic, p)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log start of %s/%d is %d, want %d", topic, p, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// produceAt produces one batch per record, each with the given timestamp.
func produceAt(t *testing.T, cl *kgo.Client, topic string, ts time.Time, values ...string) {
	t.Helper()
	for _, v := range values {
		if err := cl.ProduceSync(ctx30(t), &kgo.Record{Topic: topic, Partition: 0, Value: []byte(v), Timestamp: ts}).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", v, err)
		}
	}
}

// fetchCode fetches partition 0 of topic at offset off and returns the
// partition's error code.
func fetchCode(t *testing.T, addr, topic string, off int64) int16 {
	rc := dialRaw(t, addr)
	req := fetchReq(topic, 1, 0)
	req.Topics[0].Partitions[0].FetchOffset = off
	return rc.do(req, 11).(*kmsg.FetchResponse).Topics[0].Partitions[0].ErrorCode
}

// TestRetentionMsMovesLogStart: with retention.ms set, the background task
// moves the log start past the batches whose timestamps are older than
// it (the first young batch stops it); ListOffsets earliest says so, a
// fetch below it is OFFSET_OUT_OF_RANGE, and a consumer from the start
// gets the first retained record. Setting retention.ms back to -1 stops
// it.
func TestRetentionMsMovesLogStart(t *testing.T) {
	n := retentionNode(t)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": kmsg.StringPtr("-1")}, "aged"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	old := time.Now().Add(-2 * time.Hour)
	produceAt(t, cl, "aged", old, "old-0", "old-1", "old-2")
	produceAt(t, cl, "aged", time.Now(), "new-3")
	produceAt(t, cl, "aged", old, "old-behind-new-4") // behind a young batch: kept, as Kafka keeps a segment
	rounds := n.srv.retentionRounds.Load()
	waitRounds(t, n, rounds+3) // rounds with retention.ms=-1
	if got := earliest(t, adm, "aged", 0); got != 0 {
		t.Fatalf("retention.ms=-1 moved the log start to %d", got)
	}
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("3600000")}}, "aged"); err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	waitEarliest(t, adm, "aged", 0, 3)
	if code := fetchCode(t, n.addr, "aged", 1); code != errOffsetOutOfRange {
		t.Fatalf("fetch below the log start: code %d, want OFFSET_OUT_OF_RANGE", code)
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"aged": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fs := c.PollRecords(ctx, 1)
	if recs := fs.Records(); len(recs) == 0 || recs[0].Offset != 3 || string(recs[0].Value) != "new-3" {
		t.Fatalf("consumer from the start got %+v (errors %v), want new-3 at 3", recs, fs.Errors())
	}
	if v, _ := n.core.Topic("aged"); deletedBelow(v, 0) != 3 {
		t.Fatalf("the log start kept in the topic's attributes is %d", deletedBelow(v, 0))
	}
}

// TestRetentionBytesMovesLogStart: with retention.bytes set, the log start
// moves past the oldest records while what is left without them is at
// least retention.bytes (so a partition keeps less than retention.bytes
// plus its oldest record, as Kafka keeps less than it plus a segment).
func TestRetentionBytesMovesLogStart(t *testing.T) {
	n := retentionNode(t)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "sized"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	noise := make([]byte, 1000)
	for range 10 {
		rand.Read(noise)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "sized", Partition: 0, Value: noise}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var ents [10]store.QueueEntry
	if k, err := n.st.QueueEntries("sized", 0, 0, ents[:]); err != nil || k != 10 {
		t.Fatalf("entries: %d %v", k, err)
	}
	size := int64(ents[0].Size) // every record is one batch of one 1000-byte record: about the same size
	limit := 3*size + size/2    // three and a half: four are kept (without the oldest of them, less than the limit would be left)
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: kmsg.StringPtr(itoa(limit))}}, "sized"); err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	waitEarliest(t, adm, "sized", 0, 6)
	if got := consumeN(t, n.addr, "sized", 0, 6, 4); got[0].Offset != 6 || len(got) != 4 {
		t.Fatalf("read back %d records from 6", len(got))
	}
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.bytes", Value: kmsg.StringPtr("0")}}, "sized"); err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	waitEarliest(t, adm, "sized", 0, 10) // retention.bytes=0 keeps nothing, as in Kafka
}

// TestLogAppendTime: a topic with message.timestamp.type=LogAppendTime
// has every batch stamped with its store time at append: a consumer sees
// the append time (and the LogAppendTime type) instead of the producer's
// timestamp; the batch's CRC is valid (franz-go checks it).
func TestLogAppendTime(t *testing.T) {
	n := startNode(t, nil)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"message.timestamp.type": kmsg.StringPtr("LogAppendTime")}, "stamped"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "created"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	producerTs := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	before := time.Now().Add(-time.Second)
	produceAt(t, cl, "stamped", producerTs, "a")
	produceAt(t, cl, "created", producerTs, "b")
	after := time.Now().Add(time.Second)
	c, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"stamped": {0: kgo.NewOffset().AtStart()}, "created": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := map[string]*kgo.Record{}
	for len(got) < 2 {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 2", len(got))
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		for _, r := range fs.Records() {
			got[r.Topic] = r
		}
	}
	if r := got["stamped"]; r.Attrs.TimestampType() != 1 || r.Timestamp.Before(before) || r.Timestamp.After(after) {
		t.Fatalf("LogAppendTime topic: timestamp %v type %d, want the append time (between %v and %v)", r.Timestamp, r.Attrs.TimestampType(), before, after)
	}
	if r := got["created"]; r.Attrs.TimestampType() != 0 || !r.Timestamp.Equal(producerTs) {
		t.Fatalf("CreateTime topic: timestamp %v type %d, want the producer's", r.Timestamp, r.Attrs.TimestampType())
	}
}

// TestMaxMessageBytesAboveBroker: max.message.bytes may be raised above the
// broker's maxMessageSize up to what the store takes in one record, and
// Produce then takes batches that large into that topic only; beyond the
// store's limit it is refused naming it.
func TestMaxMessageBytesAboveBroker(t *testing.T) {
	n := startNodeStore(t, nil, Config{}, func(c *store.Config) { c.MaxRecordBodyBytes = 8 << 20 })
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchMaxBytes(7<<20), kgo.BrokerMaxWriteBytes(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kmsg.StringPtr(itoa(9 << 20))}, "huge"); !errors.Is(err, kerr.InvalidConfig) && !errors.Is(r.Err, kerr.InvalidConfig) {
		t.Fatalf("max.message.bytes beyond the store's record limit: %v %v", err, r.Err)
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kmsg.StringPtr(itoa(7 << 20))}, "big"); err != nil || r.Err != nil {
		t.Fatalf("max.message.bytes=7 MiB: %v %v %s", err, r.Err, r.ErrMessage)
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "normal"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	value := make([]byte, 6<<20)
	rand.Read(value)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "big", Value: value}).FirstErr(); err != nil {
		t.Fatalf("6 MiB into a 7 MiB topic (broker limit 4 MiB): %v", err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "normal", Value: value}).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("6 MiB into a topic at the broker's 4 MiB: %v, want MESSAGE_TOO_LARGE", err)
	}
	if got := consumeN(t, n.addr, "big", 0, 0, 1); len(got[0].Value) != len(value) {
		t.Fatalf("read back %d bytes", len(got[0].Value))
	}
}

// TestRetentionHoldsAgainstBrokerRetention: a topic retained longer than
// fileReservedTime (or forever) holds its partitions' log starts from the
// store's age retention; one retained less, or not set, holds nothing.
func TestRetentionHoldsAgainstBrokerRetention(t *testing.T) {
	n := startNode(t, nil)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	for name, ms := range map[string]string{"forever": "-1", "longer": itoa(100 * 3600 * 1000), "shorter": "1000"} {
		if r, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"retention.ms": kmsg.StringPtr(ms)}, name); err != nil || r.Err != nil {
			t.Fatal(err, r.Err)
		}
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "plain"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	if rs, err := adm.DeleteRecords(ctx, kadm.Offsets{"forever": {1: {Topic: "forever", Partition: 1, At: 0}}}); err != nil || rs.Error() != nil {
		t.Fatal(err, rs.Error())
	}
	h := n.srv.ageHolds()
	if len(h) != 2 || len(h["forever"]) != 2 || len(h["longer"]) != 2 {
		t.Fatalf("holds %v, want both partitions of forever and longer only", h)
	}
}

// TestRetentionLogStartSurvivesPowerLoss: once a retention round has
// moved a log start, a power loss (the MemFS keeps only what an
// fdatasync covered) does not bring it back: after the restart ListOffsets
// earliest and a consumer from the start begin at it.
func TestRetentionLogStartSurvivesPowerLoss(t *testing.T) {
	n := startNode(t, nil) // retention rounds run by hand below
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": kmsg.StringPtr("60000")}, "pl"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	cl2, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl2.Close()
	produceAt(t, cl2, "pl", time.Now().Add(-time.Hour), "o0", "o1", "o2", "o3")
	produceAt(t, cl2, "pl", time.Now(), "n4", "n5")
	cl.Close()
	n.srv.applyRetention(time.Now())
	survived := n.fs.CrashCloneWith(mrand.New(mrand.NewPCG(1, 2)))
	n.stop()
	n2 := startNode(t, survived)
	_, adm2 := adminClient(t, n2.addr)
	if got := earliest(t, adm2, "pl", 0); got != 4 {
		t.Fatalf("log start after the power loss %d, want 4", got)
	}
	if got := consumeN(t, n2.addr, "pl", 0, 4, 2); string(got[0].Value) != "n4" {
		t.Fatalf("first record after the power loss %q", got[0].Value)
	}
}

// TestCompressionTypeRecompresses: a topic whose compression.type names a
// codec stores every batch in it, whatever the producer used (franz-go
// producing snappy, and uncompressed), and consumers read the records
// back; "producer" stores each batch as produced; max.message.bytes
// applies to the batch as stored.
func TestCompressionTypeRecompresses(t *testing.T) {
	n := startNode(t, nil)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	want := map[string]int16{"uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
	for name := range want {
		if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"compression.type": kmsg.StringPtr(name)}, "z."+name); err != nil || r.Err != nil {
			t.Fatal(err, r.Err, r.ErrMessage)
		}
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "z.producer"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	prefix := strings.Repeat("v", 300) // compressible: the client compresses it
	for _, pc := range []kgo.CompressionCodec{kgo.SnappyCompression(), kgo.NoCompression()} {
		cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(pc))
		if err != nil {
			t.Fatal(err)
		}
		for name := range want {
			produceAll(t, cl, "z."+name, 0, 5, prefix)
		}
		produceAll(t, cl, "z.producer", 0, 5, prefix)
		cl.Close()
	}
	for name, codec := range want {
		if got := storedCodecs(t, n, "z."+name, 0); len(got) != 1 || !got[codec] {
			t.Errorf("compression.type=%s: stored codecs %v", name, got)
		}
		recs := consumeN(t, n.addr, "z."+name, 0, 0, 10)
		for i, r := range recs {
			if r.Offset != int64(i) || string(r.Value) != fmt.Sprintf("%s-%d", prefix, i%5) {
				t.Fatalf("compression.type=%s: record %d is %d %q", name, i, r.Offset, r.Value)
			}
		}
	}
	if got := storedCodecs(t, n, "z.producer", 0); len(got) != 2 || !got[0] || !got[2] {
		t.Errorf("compression.type=producer: stored codecs %v, want the producer's snappy and none", got)
	}
	// A 20 kB batch of one repeated byte, produced zstd (tiny), is too
	// large for a 10 kB topic once stored uncompressed.
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kmsg.StringPtr("10000")}}, "z.uncompressed"); err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	big := &kgo.Record{Topic: "z.uncompressed", Value: []byte(strings.Repeat("a", 20000))}
	if err := cl.ProduceSync(ctx, big).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("20 kB decompressed into a 10 kB uncompressed topic: %v, want MESSAGE_TOO_LARGE", err)
	}
}

// TestTimestampBounds: message.timestamp.before.max.ms and after.max.ms
// (and difference.max.ms, either way) refuse a batch with a record
// stamped further from the broker's clock with INVALID_TIMESTAMP, also
// inside a compressed batch; a LogAppendTime topic is not checked (its
// records get the append time).
func TestTimestampBounds(t *testing.T) {
	n := startNode(t, nil)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	for name, cfg := range map[string]map[string]*string{
		"ts.before": {"message.timestamp.before.max.ms": kmsg.StringPtr("3600000")},
		"ts.after":  {"message.timestamp.after.max.ms": kmsg.StringPtr("60000")},
		"ts.diff":   {"message.timestamp.difference.max.ms": kmsg.StringPtr("60000")},
		"ts.append": {"message.timestamp.difference.max.ms": kmsg.StringPtr("60000"), "message.timestamp.type": kmsg.StringPtr("LogAppendTime")},
	} {
		if r, err := adm.CreateTopic(ctx, 1, 1, cfg, name); err != nil || r.Err != nil {
			t.Fatal(err, r.Err, r.ErrMessage)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	now := time.Now()
	for _, c := range []struct {
		topic string
		ts    time.Time
		ok    bool
	}{
		{"ts.before", now.Add(-2 * time.Hour), false}, {"ts.before", now.Add(-30 * time.Minute), true}, {"ts.before", now.Add(24 * time.Hour), true},
		{"ts.after", now.Add(time.Hour), false}, {"ts.after", now.Add(-24 * time.Hour), true},
		{"ts.diff", now.Add(time.Hour), false}, {"ts.diff", now.Add(-time.Hour), false}, {"ts.diff", now, true},
		{"ts.append", now.Add(-time.Hour), true},
	} {
		v := []byte(strings.Repeat("compressible ", 50))
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: c.topic, Value: v}, &kgo.Record{Topic: c.topic, Value: v, Timestamp: c.ts}).FirstErr()
		if c.ok && err != nil || !c.ok && !errors.Is(err, kerr.InvalidTimestamp) {
			t.Errorf("%s at %v from now: %v, want ok %v", c.topic, c.ts.Sub(now).Round(time.Minute), err, c.ok)
		}
	}
}

// lockedLog is a log destination tests read while the code under test
// writes it.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRetentionHoldKeepsSegmentsFromBrokerRetention: with the store's own
// age retention running (fileReservedTime 50 ms here), a topic with
// retention.ms=-1 keeps the shared CommitLog's segments from its log
// start on (the store says so at WARN, naming the partition), so another
// topic's records in them stay too; once its retention.ms is below the
// broker's the hold goes and the store deletes them.
func TestRetentionHoldKeepsSegmentsFromBrokerRetention(t *testing.T) {
	var logs lockedLog
	n := startNodeStore(t, nil, Config{MaxBatchBytes: 8 << 10, RetentionMs: 50}, func(c *store.Config) {
		c.CommitLogSegmentBytes, c.MaxMessageBytes = 64<<10, 8<<10
		c.FileReservedTime, c.RetentionCheckInterval = 50*time.Millisecond, 20*time.Millisecond
		c.DeleteWhen = "00;01;02;03;04;05;06;07;08;09;10;11;12;13;14;15;16;17;18;19;20;21;22;23"
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"retention.ms": kmsg.StringPtr("-1")}, "keep"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	if r, err := adm.CreateTopic(ctx, 1, 1, nil, "other"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	produceAt(t, cl, "keep", time.Now(), "kept")
	noise := make([]byte, 4000)
	for range 40 { // about two and a half 64 KiB segments
		rand.Read(noise)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "other", Partition: 0, Value: noise}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(logs.String(), "keep/0 group=(retention) offset=0") {
		if time.Now().After(deadline) {
			t.Fatalf("no retention round held keep/0 (holds %v, segment %d, visible %d):\n%s", n.srv.ageHolds(), n.st.SegmentBytes(), n.st.VisibleOffset(), logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if lo := n.st.MinOffset("other", 0); lo != 0 || n.st.MinOffset("keep", 0) != 0 {
		t.Fatalf("segments deleted under the hold: other starts at %d", lo)
	}
	if rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("10")}}, "keep"); err != nil || rs[0].Err != nil {
		t.Fatal(err, rs)
	}
	for n.st.MinOffset("other", 0) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("segments not deleted once the hold went:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRetentionScanInSteps: a backlog longer than one pass's scan is
// worked through in passes within one round, each writing its progress:
// the round ends at the first young batch.
func TestRetentionScanInSteps(t *testing.T) {
	was := maxRetentionScan
	t.Cleanup(func() { maxRetentionScan = was }) // after the node's cleanup, which is registered later
	maxRetentionScan = 2
	n := startNode(t, nil)
	cl, adm := adminClient(t, n.addr)
	if r, err := adm.CreateTopic(ctx30(t), 1, 1, map[string]*string{"retention.ms": kmsg.StringPtr("60000")}, "steps"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	produceAt(t, cl, "steps", time.Now().Add(-time.Hour), "o0", "o1", "o2", "o3", "o4", "o5", "o6")
	produceAt(t, cl, "steps", time.Now(), "n7")
	n.srv.applyRetention(time.Now())
	if got := earliest(t, adm, "steps", 0); got != 7 {
		t.Fatalf("log start after one round %d, want 7", got)
	}
}

// TestProduceReportsLogStart: a Produce answer carries the partition's
// log start, as Kafka's does (here the one DeleteRecords set).
func TestProduceReportsLogStart(t *testing.T) {
	n := startNode(t, nil)
	rc := dialRaw(t, n.addr)
	for range 3 {
		if got := rc.do(produceReq(-1, "ls", testBatch(2, 0)), 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; got.ErrorCode != 0 || got.LogStartOffset != 0 {
			t.Fatalf("produce: %+v", got)
		}
	}
	_, adm := adminClient(t, n.addr)
	if rs, err := adm.DeleteRecords(ctx30(t), kadm.Offsets{"ls": {0: {Topic: "ls", Partition: 0, At: 4}}}); err != nil || rs.Error() != nil {
		t.Fatal(err, rs.Error())
	}
	if got := rc.do(produceReq(-1, "ls", testBatch(2, 0)), 9).(*kmsg.ProduceResponse).Topics[0].Partitions[0]; got.ErrorCode != 0 || got.LogStartOffset != 4 {
		t.Fatalf("produce after DeleteRecords to 4: %+v", got)
	}
}

// TestRetentionPassesWithheldRecords: records the store withholds
// because they fail verification (their entries then hold nothing a
// reader gets) do not stop retention: with every old record of a
// partition withheld, the log start still moves past them.
func TestRetentionPassesWithheldRecords(t *testing.T) {
	n := startNode(t, nil)
	cl, adm := adminClient(t, n.addr)
	if r, err := adm.CreateTopic(ctx30(t), 1, 1, map[string]*string{"retention.ms": kmsg.StringPtr("60000")}, "withheld"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	produceAt(t, cl, "withheld", time.Now().Add(-time.Hour), "o0", "o1")
	var ents [2]store.QueueEntry
	if k, err := n.st.QueueEntries("withheld", 0, 0, ents[:]); err != nil || k != 2 {
		t.Fatalf("entries: %d %v", k, err)
	}
	f, err := n.fs.OpenFile("/data/commitlog/00000000000000000000", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := f.WriteAt([]byte{0xff, 0xee}, e.PhysOffset+int64(e.Size)-3); err != nil { // inside the batch's record
			t.Fatal(err)
		}
	}
	f.Close()
	n.srv.applyRetention(time.Now())
	if got := earliest(t, adm, "withheld", 0); got != 2 {
		t.Fatalf("log start %d with both old records withheld, want 2", got)
	}
}
