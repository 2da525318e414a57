package e2e

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/keelmq/keel/internal/testcluster"
)

// received collects consumed messages by body.
type received struct {
	mu   sync.Mutex
	msgs map[string]*primitive.MessageExt
	n    int // deliveries, duplicates included
}

func newReceived() *received { return &received{msgs: make(map[string]*primitive.MessageExt)} }

func (r *received) add(ms ...*primitive.MessageExt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range ms {
		r.msgs[string(m.Body)] = m
		r.n++
	}
}

func (r *received) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

func (r *received) has(body string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.msgs[body]
	return ok
}

func newProducer(t *testing.T, c *cluster, opts ...producer.Option) interface {
	SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error)
	SendAsync(context.Context, func(context.Context, *primitive.SendResult, error), ...*primitive.Message) error
	SendOneWay(context.Context, ...*primitive.Message) error
	Shutdown() error
} {
	t.Helper()
	base := []producer.Option{
		producer.WithNameServer(c.nsAddrs()), producer.WithGroupName(testcluster.Uniq("pg")),
		producer.WithInstanceName(testcluster.Uniq("p")), producer.WithRetry(2),
		producer.WithSendMsgTimeout(5 * time.Second),
	}
	p, err := producer.NewDefaultProducer(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown() })
	return p
}

type pushConsumer interface {
	Subscribe(string, consumer.MessageSelector, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error)) error
	Start() error
	Shutdown() error
}

func newPushConsumer(t *testing.T, c *cluster, group string, opts ...consumer.Option) pushConsumer {
	t.Helper()
	base := []consumer.Option{
		consumer.WithNameServer(c.nsAddrs()), consumer.WithGroupName(group),
		consumer.WithInstance(testcluster.Uniq("c")), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}
	pc, err := consumer.NewPushConsumer(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return pc
}

func startConsumer(t *testing.T, pc pushConsumer, topic, expr string, r *received) {
	t.Helper()
	err := pc.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: expr},
		func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			r.add(ms...)
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Shutdown() })
}

func msg(topic, tag, body string) *primitive.Message {
	m := primitive.NewMessage(topic, []byte(body))
	if tag != "" {
		m.WithTag(tag)
	}
	m.WithKeys([]string{"key-" + body})
	return m
}

// TestProduceAndConsumeWithTags: sync, async, oneway and batch sends to an
// auto-created topic; a push consumer subscribed to two of three tags gets
// exactly those.
func TestProduceAndConsumeWithTags(t *testing.T) {
	c := startCluster(t)
	topic := testcluster.Uniq("Tags")
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	want := map[string]bool{}
	tags := []string{"TagA", "TagB", "TagC"}
	for i := 0; i < 30; i++ {
		tag, body := tags[i%3], fmt.Sprintf("sync-%d", i)
		res, err := p.SendSync(ctx, msg(topic, tag, body))
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, res, err)
		}
		if res.MsgID == "" || res.OffsetMsgID == "" {
			t.Fatalf("send result without ids: %+v", res)
		}
		want[body] = tag != "TagC"
	}
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		body := fmt.Sprintf("async-%d", i)
		want[body] = true
		wg.Add(1)
		if err := p.SendAsync(ctx, func(_ context.Context, res *primitive.SendResult, err error) {
			defer wg.Done()
			if err != nil || res.Status != primitive.SendOK {
				t.Errorf("async send: %v %v", res, err)
			}
		}, msg(topic, "TagA", body)); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for i := 0; i < 3; i++ {
		body := fmt.Sprintf("oneway-%d", i)
		want[body] = true
		if err := p.SendOneWay(ctx, msg(topic, "TagB", body)); err != nil {
			t.Fatal(err)
		}
	}
	batch := []*primitive.Message{msg(topic, "TagA", "batch-0"), msg(topic, "TagA", "batch-1"), msg(topic, "TagC", "batch-2")}
	want["batch-0"], want["batch-1"], want["batch-2"] = true, true, false
	if res, err := p.SendSync(ctx, batch...); err != nil || res.Status != primitive.SendOK {
		t.Fatalf("batch send: %v %v", res, err)
	}
	c.WaitRoute(topic)

	r := newReceived()
	startConsumer(t, newPushConsumer(t, c, testcluster.Uniq("cg")), topic, "TagA || TagB", r)
	wantN := 0
	for _, ok := range want {
		if ok {
			wantN++
		}
	}
	testcluster.WaitFor(t, 30*time.Second, "all TagA/TagB messages", func() bool { return r.count() >= wantN })
	r.mu.Lock()
	defer r.mu.Unlock()
	for body, m := range r.msgs {
		if !want[body] {
			t.Errorf("received %s with tag %s, not subscribed", body, m.GetTags())
		}
		if m.GetKeys() != "key-"+body {
			t.Errorf("%s: keys %q", body, m.GetKeys())
		}
	}
}

// TestClusteringRebalanceWhenMemberLeaves: three members share the queues;
// when one leaves, the others take its queues over (told by
// NOTIFY_CONSUMER_IDS_CHANGED, well before the 20 s rebalance timer).
func TestClusteringRebalanceWhenMemberLeaves(t *testing.T) {
	c := startCluster(t)
	topic, group := testcluster.Uniq("Rebalance"), testcluster.Uniq("cg")
	c.CreateTopic(topic, 6)
	rs := []*received{newReceived(), newReceived(), newReceived()}
	var pcs []pushConsumer
	for i := range rs {
		pc := newPushConsumer(t, c, group)
		startConsumer(t, pc, topic, "*", rs[i])
		pcs = append(pcs, pc)
	}
	testcluster.WaitFor(t, 15*time.Second, "three members", func() bool { return len(c.consumerIDs(group)) == 3 })
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	send := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			if _, err := p.SendSync(ctx, msg(topic, "", fmt.Sprintf("%s-%d", prefix, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	send("before", 60)
	total := func() int { return rs[0].count() + rs[1].count() + rs[2].count() }
	defer func() {
		if t.Failed() {
			t.Logf("counts %d %d %d ids %v", rs[0].count(), rs[1].count(), rs[2].count(), c.consumerIDs(group))
		}
	}()
	testcluster.WaitFor(t, 20*time.Second, "messages spread over three members", func() bool {
		return total() >= 60 && rs[0].count() > 0 && rs[1].count() > 0 && rs[2].count() > 0
	})
	pcs[2].Shutdown()
	testcluster.WaitFor(t, 15*time.Second, "two members", func() bool { return len(c.consumerIDs(group)) == 2 })
	send("after", 60)
	// The remaining members must own all six queues now.
	testcluster.WaitFor(t, 15*time.Second, "messages after the leave", func() bool {
		n := 0
		for i := 0; i < 60; i++ {
			body := fmt.Sprintf("after-%d", i)
			if rs[0].has(body) || rs[1].has(body) {
				n++
			}
		}
		return n == 60
	})
}

// TestBroadcasting: every member of a broadcasting group gets every message.
func TestBroadcasting(t *testing.T) {
	c := startCluster(t)
	topic, group := testcluster.Uniq("Broadcast"), testcluster.Uniq("cg")
	c.CreateTopic(topic, 4)
	rs := []*received{newReceived(), newReceived()}
	for _, r := range rs {
		startConsumer(t, newPushConsumer(t, c, group, consumer.WithConsumerModel(consumer.BroadCasting)), topic, "*", r)
	}
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	testcluster.WaitFor(t, 15*time.Second, "both members", func() bool { return len(c.consumerIDs(group)) == 2 })
	for i := 0; i < 20; i++ {
		if _, err := p.SendSync(ctx, msg(topic, "", fmt.Sprintf("b-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	testcluster.WaitFor(t, 20*time.Second, "every member has every message", func() bool { return rs[0].count() == 20 && rs[1].count() == 20 })
}

// TestOrderlyPerQueueOrder: messages of one sharding key go to one queue and
// an orderly consumer sees each queue in offset order.
func TestOrderlyPerQueueOrder(t *testing.T) {
	skipUnderRace(t)
	c := startCluster(t)
	topic, group := testcluster.Uniq("Orderly"), testcluster.Uniq("cg")
	c.CreateTopic(topic, 4)
	p := newProducer(t, c, producer.WithQueueSelector(producer.NewHashQueueSelector()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const keys, perKey = 4, 25
	for i := 0; i < perKey; i++ {
		for k := 0; k < keys; k++ {
			m := msg(topic, "", fmt.Sprintf("k%d-%03d", k, i))
			m.WithShardingKey(fmt.Sprintf("order-%d", k))
			if _, err := p.SendSync(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	var mu sync.Mutex
	seen := map[string][]string{} // sharding key -> bodies in consumption order
	pc := newPushConsumer(t, c, group, consumer.WithConsumerOrder(true))
	err := pc.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			k := m.GetShardingKey()
			seen[k] = append(seen[k], string(m.Body))
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Shutdown() })
	testcluster.WaitFor(t, 30*time.Second, "all orderly messages", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range seen {
			n += len(v)
		}
		return n >= keys*perKey
	})
	mu.Lock()
	defer mu.Unlock()
	for k, bodies := range seen {
		if !sort.StringsAreSorted(bodies) {
			t.Errorf("key %s consumed out of order: %v", k, bodies)
		}
	}
}
