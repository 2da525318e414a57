package kafka

import (
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func adminClient(t *testing.T, addr string) (*kgo.Client, *kadm.Client) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl, kadm.NewClient(cl)
}

func ctx30(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestKadmCreatePartitions: kadm grows a topic's partitions (queues); a
// lower or equal count is refused and the topic is unchanged.
func TestKadmCreatePartitions(t *testing.T) {
	n := startNode(t, nil)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if _, err := adm.CreateTopic(ctx, 2, 1, nil, "grow.me"); err != nil {
		t.Fatal(err)
	}
	rs, err := adm.UpdatePartitions(ctx, 5, "grow.me")
	if err != nil || rs["grow.me"].Err != nil {
		t.Fatalf("update partitions: %v %+v", err, rs)
	}
	if tc, _ := n.core.Topic("grow.me"); tc.ReadQueueNums != 5 || tc.WriteQueueNums != 5 {
		t.Fatalf("queues %d/%d, want 5", tc.ReadQueueNums, tc.WriteQueueNums)
	}
	rs, err = adm.UpdatePartitions(ctx, 3, "grow.me")
	if err != nil || !errors.Is(rs["grow.me"].Err, kerr.InvalidPartitions) {
		t.Fatalf("shrink: %v %+v", err, rs)
	}
	if tc, _ := n.core.Topic("grow.me"); tc.ReadQueueNums != 5 {
		t.Fatalf("queues %d after a refused shrink", tc.ReadQueueNums)
	}
	cl.ForceMetadataRefresh()
	produceAll(t, cl, "grow.me", 4, 3, "new")
	if got := consumeN(t, n.addr, "grow.me", 4, 0, 3); string(got[2].Value) != "new-2" {
		t.Fatalf("new partition read back %q", got[2].Value)
	}
}

// TestKadmConfigs: DescribeConfigs reports Keel's values (retention.ms is
// the broker's until set), max.message.bytes may be set per topic and
// Produce honours it, a config Keel cannot honour is refused, and so is
// an unknown one.
func TestKadmConfigs(t *testing.T) {
	n := startNode(t, nil)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": kmsg.StringPtr("2000"), "cleanup.policy": kmsg.StringPtr("delete")}, "cfg"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, "compacted"); !errors.Is(err, kerr.InvalidConfig) {
		t.Fatalf("compacted topic: %v, want INVALID_CONFIG", err)
	}
	value := func(name string) (kadm.Config, bool) {
		rcs, err := adm.DescribeTopicConfigs(ctx, "cfg")
		if err != nil {
			t.Fatal(err)
		}
		rc, err := rcs.On("cfg", nil)
		if err != nil || rc.Err != nil {
			t.Fatalf("describe: %v %v", err, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key == name {
				return c, true
			}
		}
		return kadm.Config{}, false
	}
	if c, ok := value("retention.ms"); !ok || c.MaybeValue() != "259200000" || c.Source != kmsg.ConfigSourceStaticBrokerConfig {
		t.Fatalf("retention.ms %+v %v, want the broker's 72 h", c, ok)
	}
	if c, ok := value("max.message.bytes"); !ok || c.MaybeValue() != "2000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Fatalf("max.message.bytes %+v %v", c, ok)
	}
	noise := make([]byte, 3000)
	rand.Read(noise) // incompressible
	big := &kgo.Record{Topic: "cfg", Value: noise}
	if err := cl.ProduceSync(ctx, big).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("3000-byte record into a 2000-byte topic: %v", err)
	}
	rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "max.message.bytes", Value: kmsg.StringPtr("100000")}}, "cfg")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("alter: %v %+v", err, rs)
	}
	if err := cl.ProduceSync(ctx, big).FirstErr(); err != nil {
		t.Fatalf("after raising max.message.bytes: %v", err)
	}
	for _, c := range []kadm.AlterConfig{{Name: "cleanup.policy", Value: kmsg.StringPtr("compact")}, {Name: "no.such.config", Value: kmsg.StringPtr("1")}} {
		rs, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{c}, "cfg")
		if err != nil || !errors.Is(rs[0].Err, kerr.InvalidConfig) {
			t.Fatalf("alter %s: %v %+v, want INVALID_CONFIG", c.Name, err, rs)
		}
	}
	rs, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "retention.ms", Value: kmsg.StringPtr("259200000")}}, "cfg")
	if err != nil || rs[0].Err != nil {
		t.Fatalf("retention.ms to its own value: %v %+v", err, rs)
	}
	brs, err := adm.DescribeBrokerConfigs(ctx, 0)
	if err != nil || len(brs) != 1 || brs[0].Err != nil {
		t.Fatalf("broker configs: %v %+v", err, brs)
	}
	found := false
	for _, c := range brs[0].Configs {
		found = found || c.Key == "message.max.bytes" && c.MaybeValue() == "4194304"
	}
	if !found {
		t.Fatalf("message.max.bytes not 4194304 in %+v", brs[0].Configs)
	}
}

// TestKadmDeleteRecords: DeleteRecords advances the log start; Fetch and
// ListOffsets honour it, also after a restart and after a RocketMQ-side
// update of the topic (which carries no attributes).
func TestKadmDeleteRecords(t *testing.T) {
	n := startNode(t, nil)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "trim"); err != nil {
		t.Fatal(err)
	}
	for range 4 { // four batches of 5
		produceAll(t, cl, "trim", 0, 5, "r")
	}
	var os kadm.Offsets
	os.AddOffset("trim", 0, 12, -1) // inside the third batch
	rs, err := adm.DeleteRecords(ctx, os)
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := rs.Lookup("trim", 0); r.Err != nil || r.LowWatermark != 12 {
		t.Fatalf("delete records: %+v", r)
	}
	check := func(addr string) {
		_, adm := adminClient(t, addr)
		starts, err := adm.ListStartOffsets(ctx, "trim")
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := starts.Lookup("trim", 0); o.Offset != 12 {
			t.Fatalf("start offset %d, want 12", o.Offset)
		}
		got := consumeN(t, addr, "trim", 0, 12, 8)
		if got[0].Offset != 12 || got[7].Offset != 19 {
			t.Fatalf("consumed from %d to %d, want 12..19", got[0].Offset, got[len(got)-1].Offset)
		}
		// Below the start: out of range, and a consumer resetting to the
		// earliest offset starts at 12.
		c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"trim": {0: kgo.NewOffset().At(3)}}),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for {
			fs := c.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatal("no records after resetting")
			}
			if rs := fs.Records(); len(rs) > 0 {
				if rs[0].Offset != 12 {
					t.Fatalf("a consumer at 3 reset to %d, want 12", rs[0].Offset)
				}
				break
			}
		}
	}
	// As RocketMQ's UPDATE_AND_CREATE_TOPIC does: a whole new config.
	if err := n.core.UpdateTopic(core.NewTopicConfig("trim", 1, core.PermRW)); err != nil {
		t.Fatal(err)
	}
	check(n.addr)
	n.stop()
	check(startNode(t, n.fs).addr)
}

// TestDescribeClusterAndDeleteGroups: DescribeCluster names this broker;
// DeleteGroups drops an empty group's offsets, refuses a group with
// members and an unknown one; OffsetDelete drops one partition's offset,
// not of a topic the group's members subscribe to.
func TestDescribeClusterAndDeleteGroups(t *testing.T) {
	n := startNode(t, nil)
	cl, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	dc := kmsg.NewPtrDescribeClusterRequest()
	dr, err := dc.RequestWith(ctx, cl)
	if err != nil || dr.ErrorCode != 0 || len(dr.Brokers) != 1 || dr.Brokers[0].NodeID != 0 || dr.ClusterID != "keel" {
		t.Fatalf("describe cluster: %v %+v", err, dr)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "dg"); err != nil {
		t.Fatal(err)
	}
	produceAll(t, cl, "dg", 0, 3, "v")
	var os kadm.Offsets
	os.AddOffset("dg", 0, 2, -1)
	if _, err := adm.CommitOffsets(ctx, "gone", os); err != nil {
		t.Fatal(err)
	}
	member := groupClient(t, n.addr, "busy", "dg")
	defer member.Close()
	pollValues(t, member, 3)
	if err := member.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}
	// OffsetDelete: refused while "busy" subscribes to dg; done for "gone".
	ds, err := adm.DeleteOffsets(ctx, "busy", kadm.TopicsSet{"dg": {0: {}}})
	if e, _ := ds.Lookup("dg", 0); err != nil || !errors.Is(e, kerr.GroupSubscribedToTopic) {
		t.Fatalf("offset delete of a subscribed topic: %v %v", err, e)
	}
	if _, ok := n.core.ConsumerOffset("busy", "dg", 0, false); !ok {
		t.Fatal("a refused OffsetDelete dropped the offset")
	}
	var more kadm.Offsets
	more.AddOffset("dg", 0, 1, -1)
	if _, err := adm.CommitOffsets(ctx, "partial", more); err != nil {
		t.Fatal(err)
	}
	ds, err = adm.DeleteOffsets(ctx, "partial", kadm.TopicsSet{"dg": {0: {}}})
	if e, _ := ds.Lookup("dg", 0); err != nil || e != nil {
		t.Fatalf("offset delete: %v %v", err, e)
	}
	if _, ok := n.core.ConsumerOffset("partial", "dg", 0, false); ok {
		t.Fatal("OffsetDelete left the offset")
	}
	rs, err := adm.DeleteGroups(ctx, "gone", "busy", "never")
	if err != nil {
		t.Fatal(err)
	}
	if rs["gone"].Err != nil || !errors.Is(rs["busy"].Err, kerr.NonEmptyGroup) || !errors.Is(rs["never"].Err, kerr.GroupIDNotFound) {
		t.Fatalf("delete groups: %+v", rs)
	}
	if _, ok := n.core.ConsumerOffset("gone", "dg", 0, false); ok {
		t.Fatal("the deleted group's offset is still there")
	}
	fo, err := adm.FetchOffsets(ctx, "gone")
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := fo.Lookup("dg", 0); ok && o.At >= 0 {
		t.Fatalf("deleted group fetched offset %d", o.At)
	}
}
