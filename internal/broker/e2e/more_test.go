package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/testcluster"
)

func (c *cluster) consumerIDs(group string) []string {
	resp := c.invoke(c.BrokerAddr(), remoting.ReqGetConsumerListByGroup, map[string]string{"consumerGroup": group})
	var body struct {
		ConsumerIDList []string `json:"consumerIdList"`
	}
	json.Unmarshal(resp.Body, &body)
	return body.ConsumerIDList
}

// consumerOffset returns the broker's committed offset of a queue, or -1.
func (c *cluster) consumerOffset(group, topic string, q int) int64 {
	resp := c.invoke(c.BrokerAddr(), remoting.ReqQueryConsumerOffset, map[string]string{
		"consumerGroup": group, "topic": topic, "queueId": fmt.Sprint(q), "setZeroIfNotFound": "false"})
	if resp.Code != 0 {
		return -1
	}
	var off int64
	fmt.Sscan(resp.ExtFields["offset"], &off)
	return off
}

// TestPullConsumer pulls explicit queues with the lite pull consumer.
func TestPullConsumer(t *testing.T) {
	skipUnderRace(t)
	c := startCluster(t)
	topic := testcluster.Uniq("Pull")
	c.CreateTopic(topic, 1)
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		if _, err := p.SendSync(ctx, msg(topic, "T", fmt.Sprintf("p-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// An acknowledged send is visible once dispatched, which may be just
	// after the acknowledgement: the max offset checked below is 10 only then.
	testcluster.WaitFor(t, 10*time.Second, "dispatch", func() bool { return c.Store().MaxOffset(topic, 0) == 10 })
	pc, err := consumer.NewPullConsumer(consumer.WithNameServer(c.nsAddrs()), consumer.WithGroupName(testcluster.Uniq("pull")),
		consumer.WithInstance(testcluster.Uniq("pc")))
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Subscribe(topic, consumer.MessageSelector{}); err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Shutdown() })
	mq := &primitive.MessageQueue{Topic: topic, BrokerName: "broker-a", QueueId: 0}
	var got []string
	var next int64
	for len(got) < 10 && ctx.Err() == nil {
		res, err := pc.PullFrom(ctx, mq, next, 4)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != primitive.PullFound {
			t.Fatalf("pull status %v at %d", res.Status, next)
		}
		for _, m := range res.GetMessageExts() {
			got = append(got, string(m.Body))
		}
		next = res.NextBeginOffset
		if res.MaxOffset != 10 {
			t.Fatalf("max offset %d", res.MaxOffset)
		}
	}
	for i, b := range got {
		if b != fmt.Sprintf("p-%d", i) {
			t.Fatalf("pulled %v", got)
		}
	}
}

// TestOffsetsSurviveBrokerRestart: a group consumes, the broker restarts,
// and the group resumes after what it consumed: every message is seen,
// nothing consumed before the restart is delivered again (the consumer
// shut down cleanly, so its offsets were committed).
func TestOffsetsSurviveBrokerRestart(t *testing.T) {
	c := startCluster(t)
	topic, group := testcluster.Uniq("Restart"), testcluster.Uniq("cg")
	c.CreateTopic(topic, 2)
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	send := func(prefix string, n int) {
		for i := 0; i < n; i++ {
			if _, err := p.SendSync(ctx, msg(topic, "", fmt.Sprintf("%s-%d", prefix, i))); err != nil {
				t.Fatalf("send %s-%d: %v", prefix, i, err)
			}
		}
	}
	send("first", 20)
	r1 := newReceived()
	pc := newPushConsumer(t, c, group)
	startConsumer(t, pc, topic, "*", r1)
	testcluster.WaitFor(t, 20*time.Second, "first batch consumed", func() bool { return r1.count() == 20 })
	pc.Shutdown() // persists the offsets to the broker
	testcluster.WaitFor(t, 10*time.Second, "committed offsets", func() bool {
		return c.consumerOffset(group, topic, 0)+c.consumerOffset(group, topic, 1) == 20
	})

	c.Restart()
	if got := c.consumerOffset(group, topic, 0) + c.consumerOffset(group, topic, 1); got != 20 {
		t.Fatalf("offsets after restart sum to %d, want 20", got)
	}
	c.WaitRoute(topic)
	send("second", 20)
	r2 := newReceived()
	startConsumer(t, newPushConsumer(t, c, group), topic, "*", r2)
	testcluster.WaitFor(t, 30*time.Second, "second batch consumed", func() bool { return r2.count() >= 20 })
	r2.mu.Lock()
	defer r2.mu.Unlock()
	for body := range r2.msgs {
		if r1.has(body) {
			t.Errorf("%s consumed again after the restart", body)
		}
	}
}

// TestRetryThenDeadLetter: a message the consumer keeps failing
// (RECONSUME_LATER) is redelivered through %RETRY%<group> with increasing
// reconsume times and lands in %DLQ%<group> after maxReconsumeTimes. No
// Scheduler is installed here, so the retries come without back-off.
func TestRetryThenDeadLetter(t *testing.T) {
	c := startCluster(t)
	topic, group := testcluster.Uniq("Retry"), testcluster.Uniq("cg")
	c.CreateTopic(topic, 1)
	c.CreateTopic("%RETRY%"+group, 1) // so the consumer has the retry route at start
	p := newProducer(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.SendSync(ctx, msg(topic, "", "doomed")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var times []int32
	pc := newPushConsumer(t, c, group, consumer.WithMaxReconsumeTimes(2))
	err := pc.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			if string(m.Body) == "doomed" {
				times = append(times, m.ReconsumeTimes)
			}
		}
		return consumer.ConsumeRetryLater, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Shutdown() })
	dlq := "%DLQ%" + group
	testcluster.WaitFor(t, 20*time.Second, "message in the DLQ", func() bool {
		resp := c.invoke(c.BrokerAddr(), remoting.ReqGetMaxOffset, map[string]string{"topic": dlq, "queueId": "0"})
		return resp.ExtFields["offset"] == "1"
	})
	mu.Lock()
	defer mu.Unlock()
	if len(times) != 3 || times[0] != 0 || times[1] != 1 || times[2] != 2 {
		t.Fatalf("deliveries with reconsume times %v, want [0 1 2]", times)
	}
}
