package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOffsetForLeaderEpoch: a leader whose history is epoch 1 from the
// CommitLog's start, then epoch 3 from where it stood after three
// records of partition 0: produced batches carry the epoch they were
// written in; OffsetForLeaderEpoch answers Kafka's end offsets (epoch 1
// and 2: 3; epoch 3, the current one: the high watermark 5; epoch 0, no
// epoch known: the high watermark; an epoch newer than any: undefined),
// checks CurrentLeaderEpoch as Fetch does, and another group's broker
// answers NOT_LEADER_OR_FOLLOWER. ApiVersions advertises it.
func TestOffsetForLeaderEpoch(t *testing.T) {
	var mu sync.Mutex
	hist := []EpochStart{{Epoch: 1, Start: 0}}
	f := &fakeCluster{}
	n := startNodeWith(t, nil, Config{NodeID: 1, Group: "broker-a", Cluster: f,
		EpochHistory: func() []EpochStart { mu.Lock(); defer mu.Unlock(); return append([]EpochStart(nil), hist...) },
		LocalGroup:   func() LocalGroup { mu.Lock(); defer mu.Unlock(); return LocalGroup{Epoch: hist[len(hist)-1].Epoch} }})
	f.add(clusterMember{group: "broker-a", nodeID: 1, epoch: -1, node: n})
	other := startClusterNode(t, f, "broker-b", 0, 2)
	createLocalTopic(t, n, "E", 1)
	createLocalTopic(t, other, "E", 1)
	refreshViews(n, other)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(k int) {
		for i := 0; i < k; i++ {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "E", Partition: 0, Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	produce(3)
	mu.Lock()
	hist = append(hist, EpochStart{Epoch: 3, Start: n.st.Offset(store.Written)})
	mu.Unlock()
	produce(2)

	cc, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"E": {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var epochs []int32
	for len(epochs) < 5 {
		fs := cc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %v: %v", epochs, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) { epochs = append(epochs, r.LeaderEpoch) })
	}
	if fmt.Sprint(epochs) != "[1 1 1 3 3]" {
		t.Errorf("records' leader epochs %v, want [1 1 1 3 3]", epochs)
	}

	ask := func(addr string, epoch, current int32) kmsg.OffsetForLeaderEpochResponseTopicPartition {
		t.Helper()
		req := kmsg.NewPtrOffsetForLeaderEpochRequest()
		req.Version, req.ReplicaID = 4, -1
		rt := kmsg.NewOffsetForLeaderEpochRequestTopic()
		rt.Topic = "E"
		rp := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
		rp.Partition, rp.LeaderEpoch, rp.CurrentLeaderEpoch = 0, epoch, current
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		return dialRaw(t, addr).do(req, 4).(*kmsg.OffsetForLeaderEpochResponse).Topics[0].Partitions[0]
	}
	for _, c := range []struct {
		epoch, current int32
		code           int16
		leaderEpoch    int32
		end            int64
	}{
		{1, 3, 0, 1, 3}, {2, 3, 0, 1, 3}, {3, 3, 0, 3, 5}, {0, -1, 0, 0, 5}, {4, -1, 0, -1, -1},
		{1, 2, errFencedLeaderEpoch, -1, -1}, {1, 4, errUnknownLeaderEpoch, -1, -1},
	} {
		r := ask(n.addr, c.epoch, c.current)
		if r.ErrorCode != c.code || r.LeaderEpoch != c.leaderEpoch || r.EndOffset != c.end {
			t.Errorf("epoch %d (current %d): code %d epoch %d end %d, want %d %d %d", c.epoch, c.current,
				r.ErrorCode, r.LeaderEpoch, r.EndOffset, c.code, c.leaderEpoch, c.end)
		}
	}
	if r := ask(other.addr, 1, -1); r.ErrorCode != errNotLeaderOrFollower {
		t.Errorf("at the other group's broker: code %d", r.ErrorCode)
	}
	if r, ok := apis[23]; !ok || r.max != 4 {
		t.Errorf("OffsetForLeaderEpoch advertised as %+v %v", r, ok)
	}
}
