package kafka

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// ownership records which consumer holds each partition, as the clients'
// callbacks say, and every time one was given a partition another held.
type ownership struct {
	mu         sync.Mutex
	owner      map[int32]string
	violations []string
	assigns    int
}

func (o *ownership) assigned(me string, ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range ps {
		if other, ok := o.owner[p]; ok && other != me {
			o.violations = append(o.violations, fmt.Sprintf("partition %d given to %s while %s owns it", p, me, other))
		}
		o.owner[p] = me
		o.assigns++
	}
}

func (o *ownership) released(me string, ps []int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range ps {
		if o.owner[p] == me {
			delete(o.owner, p)
		}
	}
}

// consumed is the set of record values the consumers polled.
type consumed struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *consumed) add(v string) {
	c.mu.Lock()
	c.seen[v]++
	c.mu.Unlock()
}

func (c *consumed) missing(total int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for i := 0; i < total; i++ {
		if c.seen[fmt.Sprintf("v-%d", i)] == 0 {
			n++
		}
	}
	return n
}

// member848 is a franz-go consumer of the next group protocol polling
// until it is closed, committing after every poll and when partitions are
// revoked.
type member848 struct {
	cl   *kgo.Client
	done chan struct{}
}

func startMember848(t *testing.T, addr, name, topic string, bal kgo.GroupBalancer, own *ownership, got *consumed, opts ...kgo.Opt) *member848 {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.ConsumerGroup("g848"), kgo.ConsumeTopics(topic),
		kgo.ServerSideBalancer(), kgo.Balancers(bal), kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) { own.assigned(name, a[topic]) }),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, r map[string][]int32) {
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				t.Logf("%s: commit on revoke: %v", name, err)
			}
			own.released(name, r[topic])
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, l map[string][]int32) { own.released(name, l[topic]) }),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	m := &member848{cl: cl, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			fs := cl.PollFetches(context.Background())
			if fs.IsClientClosed() {
				return
			}
			fs.EachRecord(func(r *kgo.Record) { got.add(string(r.Value)) })
			if err := cl.CommitUncommittedOffsets(context.Background()); err != nil {
				t.Logf("%s: commit: %v", name, err)
			}
		}
	}()
	return m
}

func (m *member848) close() {
	m.cl.Close()
	<-m.done
}

// TestKgo848JoinLeaveWhileProducing: three franz-go consumers of the next
// protocol (server-side assignment) join and leave one group while records
// are produced; every record is consumed, the group's committed offsets
// reach every partition's end, and no partition is ever held by two
// consumers at once (their assignment callbacks are recorded and
// checked). Once with each assignor.
func TestKgo848JoinLeaveWhileProducing(t *testing.T) {
	for _, tc := range []struct {
		name string
		bal  kgo.GroupBalancer
	}{{"uniform", kgo.CooperativeStickyBalancer()}, {"range", kgo.RangeBalancer()}} {
		t.Run(tc.name, func(t *testing.T) { testKgo848(t, tc.bal) })
	}
}

// start848Node is a node telling members to heartbeat every 100 ms, with
// topic of parts partitions.
func start848Node(t *testing.T, topic string, parts int32) *testNode {
	t.Helper()
	n := startNodeWith(t, nil, Config{ConsumerGroupHeartbeatInterval: 100 * time.Millisecond})
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, parts, 1
	req.Topics = append(req.Topics, rt)
	if code := n.srv.createTopics(req, "").(*kmsg.CreateTopicsResponse).Topics[0].ErrorCode; code != 0 {
		t.Fatalf("create: %d", code)
	}
	return n
}

func testKgo848(t *testing.T, bal kgo.GroupBalancer) {
	const topic, parts = "e848", 6
	n := start848Node(t, topic, parts)
	p, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	total := 0
	produce := func(k int) {
		t.Helper()
		var rs []*kgo.Record
		for i := 0; i < k; i++ {
			rs = append(rs, &kgo.Record{Key: fmt.Appendf(nil, "k-%d", total), Value: fmt.Appendf(nil, "v-%d", total)})
			total++
		}
		if err := p.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	own := &ownership{owner: map[int32]string{}}
	got := &consumed{seen: map[string]int{}}
	// holders says who holds the partitions now.
	holders := func() map[string]int {
		own.mu.Lock()
		defer own.mu.Unlock()
		out := map[string]int{}
		for _, who := range own.owner {
			out[who]++
		}
		return out
	}
	c1 := startMember848(t, n.addr, "c1", topic, bal, own, got)
	waitUntil(t, "c1 to hold every partition", func() bool { return holders()["c1"] == parts })
	produce(300)
	c2 := startMember848(t, n.addr, "c2", topic, bal, own, got)
	waitUntil(t, "c2 to get partitions", func() bool { return holders()["c2"] > 0 })
	produce(300)
	c3 := startMember848(t, n.addr, "c3", topic, bal, own, got)
	waitUntil(t, "c3 to get partitions", func() bool { h := holders(); return h["c3"] > 0 && h["c1"] > 0 && h["c2"] > 0 })
	produce(300)
	c1.close()
	waitUntil(t, "c2 and c3 to hold every partition", func() bool { h := holders(); return h["c2"]+h["c3"] == parts })
	produce(300)
	c2.close()
	waitUntil(t, "c3 to hold every partition", func() bool { return holders()["c3"] == parts })
	produce(300)
	waitUntil(t, "every record to be consumed", func() bool { return got.missing(total) == 0 })
	// The last member commits what it polled; then every partition's
	// committed offset is its end.
	waitUntil(t, "the committed offsets to reach the partitions' ends", func() bool {
		for q := int32(0); q < parts; q++ {
			off, ok := n.core.ConsumerOffset("g848", topic, q, false)
			hw := n.srv.parts.highWatermark(n.srv.parts.get(topic, q))
			if !ok || off != hw {
				return false
			}
		}
		return true
	})
	n.srv.gmu.Lock()
	g := n.srv.cg.groups["g848"]
	members := len(g.members)
	n.srv.gmu.Unlock()
	if members != 1 {
		t.Fatalf("the consumer group has %d members, want the one left", members)
	}
	c3.close()
	own.mu.Lock()
	defer own.mu.Unlock()
	for _, v := range own.violations {
		t.Error(v)
	}
	if own.assigns < parts {
		t.Fatalf("only %d partition assignments recorded", own.assigns)
	}
}

// TestKgo848StaticMemberRestart: a static member (instance id) of the next
// protocol closes (a -2 leave) and a new client with its instance id takes
// its partitions back; the other member never gets them meanwhile.
func TestKgo848StaticMemberRestart(t *testing.T) {
	const topic, parts = "s848", 4
	n := start848Node(t, topic, parts)
	own := &ownership{owner: map[int32]string{}}
	got := &consumed{seen: map[string]int{}}
	holding := func(who string) []int32 {
		own.mu.Lock()
		defer own.mu.Unlock()
		var ps []int32
		for p, w := range own.owner {
			if w == who {
				ps = append(ps, p)
			}
		}
		slices.Sort(ps)
		return ps
	}
	static := kgo.InstanceID("inst-s")
	s1 := startMember848(t, n.addr, "s1", topic, kgo.CooperativeStickyBalancer(), own, got, static)
	d := startMember848(t, n.addr, "d", topic, kgo.CooperativeStickyBalancer(), own, got)
	defer d.close()
	waitUntil(t, "both members to hold partitions", func() bool { return len(holding("s1")) == 2 && len(holding("d")) == 2 })
	mine := holding("s1")
	s1.close()
	n.srv.gmu.Lock()
	epoch := n.srv.cg.groups["g848"].epoch
	n.srv.gmu.Unlock()
	s2 := startMember848(t, n.addr, "s2", topic, kgo.CooperativeStickyBalancer(), own, got, static)
	defer s2.close()
	waitUntil(t, "the restarted instance to get its partitions back", func() bool { return slices.Equal(holding("s2"), mine) })
	n.srv.gmu.Lock()
	after := n.srv.cg.groups["g848"].epoch
	n.srv.gmu.Unlock()
	if after != epoch {
		t.Fatalf("group epoch moved from %d to %d across the static restart", epoch, after)
	}
	if len(holding("d")) != 2 {
		t.Fatalf("the other member holds %v", holding("d"))
	}
	own.mu.Lock()
	defer own.mu.Unlock()
	for _, v := range own.violations {
		t.Error(v)
	}
}
