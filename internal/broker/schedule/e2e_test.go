package schedule_test

// End-to-end tests: an in-process NameServer, Broker and schedule Service on
// loopback, driven by the official RocketMQ Go client. The delay levels are
// shortened so the retry path (levels 3+reconsumeTimes) takes about a second
// per hop.

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/testcluster"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

// e2eLevels: level 2 is 3s, every other level 1s.
func e2eLevels() []time.Duration {
	lv := make([]time.Duration, 18)
	for i := range lv {
		lv[i] = time.Second
	}
	lv[1] = 3 * time.Second
	return lv
}

// cluster is a NameServer and a broker with scheduled delivery on e2eLevels.
type cluster struct {
	*testcluster.Cluster
	t *testing.T
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	return &cluster{Cluster: testcluster.Start(t, testcluster.WithScheduler(e2eLevels())), t: t}
}

// createTopic creates a topic (as the admin tool does), waits for its
// route and returns its name.
func (c *cluster) createTopic(topic string, queues int) string {
	c.t.Helper()
	c.CreateTopic(topic, queues)
	return topic
}

type sender interface {
	SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error)
}

func newProducer(t *testing.T, c *cluster) sender {
	t.Helper()
	p, err := producer.NewDefaultProducer(producer.WithNameServer(primitive.NamesrvAddr(c.NamesrvAddrs())),
		producer.WithGroupName(testcluster.Uniq("pg")), producer.WithInstanceName(testcluster.Uniq("p")), producer.WithRetry(2),
		producer.WithSendMsgTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown() })
	return p
}

func send(t *testing.T, p sender, m *primitive.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.SendSync(ctx, m)
	if err != nil || res.Status != primitive.SendOK {
		t.Fatalf("send: %v %v", res, err)
	}
}

// wallBefore reports whether a is before b on the wall clock. Due times
// are wall-clock instants (a delay counts from the store timestamp, a
// timer names a time of day), and the broker fires them by the wall clock;
// time.Time.Before compares the monotonic readings when both have one, and
// a step of the wall clock between them (a virtual machine resumed, say)
// then makes a delivery on time by the wall clock look early (a run saw
// all three of one test's messages stored 3-13 ms after their due times and
// "arrived" before them).
func wallBefore(a, b time.Time) bool { return a.Round(0).Before(b.Round(0)) }

// arrival is one consumed message and when it arrived.
type arrival struct {
	m  *primitive.MessageExt
	at time.Time
}

type inbox struct {
	mu   sync.Mutex
	got  []arrival
	kind consumer.ConsumeResult
}

func (b *inbox) all() []arrival {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.got)
}

func consume(t *testing.T, c *cluster, group, topic string, result consumer.ConsumeResult, opts ...consumer.Option) *inbox {
	t.Helper()
	b := &inbox{kind: result}
	base := []consumer.Option{consumer.WithNameServer(primitive.NamesrvAddr(c.NamesrvAddrs())), consumer.WithGroupName(group),
		consumer.WithInstance(testcluster.Uniq("c")), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset)}
	pc, err := consumer.NewPushConsumer(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		now := time.Now()
		b.mu.Lock()
		for _, m := range ms {
			b.got = append(b.got, arrival{m, now})
		}
		b.mu.Unlock()
		return result, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Shutdown() })
	return b
}

// TestE2EDelayLevel: a level-2 (3s) message reaches the consumer no sooner
// than 3s after it was sent; an undelayed one sent after it arrives first.
func TestE2EDelayLevel(t *testing.T) {
	c := startCluster(t)
	topic := c.createTopic(testcluster.Uniq("Delay"), 2)
	p := newProducer(t, c)
	in := consume(t, c, testcluster.Uniq("cg"), topic, consumer.ConsumeSuccess)
	sent := time.Now()
	send(t, p, primitive.NewMessage(topic, []byte("delayed")).WithDelayTimeLevel(2).WithTag("T"))
	send(t, p, primitive.NewMessage(topic, []byte("now")))
	testcluster.WaitFor(t, 30*time.Second, "both messages", func() bool { return len(in.all()) >= 2 })
	got := in.all()
	if string(got[0].m.Body) != "now" || string(got[1].m.Body) != "delayed" {
		t.Fatalf("arrival order %q, %q", got[0].m.Body, got[1].m.Body)
	}
	d := got[1]
	if early := sent.Add(3 * time.Second).Sub(d.at); early > 0 {
		t.Fatalf("delayed message arrived %v early", early)
	}
	if d.m.StoreTimestamp < sent.UnixMilli()+3000 {
		t.Fatalf("delivered copy stored %dms after the send", d.m.StoreTimestamp-sent.UnixMilli())
	}
	if d.m.GetTags() != "T" || d.m.GetProperty(message.PropDelayLevel) != "" {
		t.Errorf("tags %q, DELAY %q", d.m.GetTags(), d.m.GetProperty(message.PropDelayLevel))
	}
	t.Logf("delay level 2 (3s): arrived after %v", d.at.Sub(sent))
}

// TestE2EDelayTimestamp: WithDelayTimestamp delivers at the timestamp, not
// before.
func TestE2EDelayTimestamp(t *testing.T) {
	c := startCluster(t)
	topic := c.createTopic(testcluster.Uniq("Timer"), 2)
	p := newProducer(t, c)
	in := consume(t, c, testcluster.Uniq("cg"), topic, consumer.ConsumeSuccess)
	at := time.Now().Add(2500 * time.Millisecond)
	send(t, p, primitive.NewMessage(topic, []byte("timer")).WithDelayTimestamp(at))
	testcluster.WaitFor(t, 30*time.Second, "timer message", func() bool { return len(in.all()) >= 1 })
	got := in.all()[0]
	if wallBefore(got.at, at) || got.m.StoreTimestamp < at.UnixMilli() {
		t.Fatalf("arrived %v early (stored %dms before the timestamp)", at.Sub(got.at), at.UnixMilli()-got.m.StoreTimestamp)
	}
	if got.m.GetProperty(message.PropTimerDeliverMs) != "" {
		t.Errorf("TIMER_DELIVER_MS kept on the delivered message")
	}
	t.Logf("timer: arrived %v after the timestamp", got.at.Sub(at))
}

// TestE2ERetryThenDLQ: a consumer that always answers RECONSUME_LATER sees
// the message with reconsume times 0, 1, 2 (maxReconsumeTimes 2), each retry
// no sooner than its 1s delay level, and then it is in %DLQ%group.
func TestE2ERetryThenDLQ(t *testing.T) {
	c := startCluster(t)
	topic, group := c.createTopic(testcluster.Uniq("Retry"), 2), testcluster.Uniq("cg")
	// The consumer's first heartbeat creates %RETRY%group, but the client
	// fetches its route only on its next periodic route update (30s), so
	// the retry topic exists before the consumer starts, as it does for
	// any group that ran before.
	c.createTopic("%RETRY%"+group, 1)
	p := newProducer(t, c)
	in := consume(t, c, group, topic, consumer.ConsumeRetryLater, consumer.WithMaxReconsumeTimes(2))
	send(t, p, primitive.NewMessage(topic, []byte("poison")).WithKeys([]string{"k-poison"}))
	dlq := "%DLQ%" + group
	testcluster.WaitFor(t, 40*time.Second, "the dead-letter queue", func() bool { return c.Store().MaxOffset(dlq, 0) == 1 })
	got := in.all()
	var times []int32
	for _, a := range got {
		times = append(times, a.m.ReconsumeTimes)
		if string(a.m.Body) != "poison" || a.m.Topic != topic {
			t.Errorf("delivery of %q on topic %q", a.m.Body, a.m.Topic)
		}
	}
	if !slices.Equal(times, []int32{0, 1, 2}) {
		t.Fatalf("reconsume times seen %v, want [0 1 2]", times)
	}
	for i := 1; i < len(got); i++ {
		t.Logf("retry %d after %v", i, got[i].at.Sub(got[i-1].at))
		if gap := got[i].at.Sub(got[i-1].at); gap < time.Second {
			t.Errorf("retry %d after %v, before its 1s delay", i, gap)
		}
	}
	r, err := c.Store().GetMessage(dlq, 0, 0, 1, 1<<20, nil)
	if err != nil || len(r.Records) != 1 {
		t.Fatalf("read DLQ: %v %v", r, err)
	}
	defer r.Release()
	m, err := message.Decode(r.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	props := message.ParseProperties(m.Properties)
	if string(m.Body) != "poison" || m.ReconsumeTimes != 3 || props[message.PropRetryTopic] != topic ||
		props[message.PropOriginMessageID] == "" || props[message.PropKeys] != "k-poison" {
		t.Errorf("DLQ message: body %q reconsume %d props %v", m.Body, m.ReconsumeTimes, props)
	}
}

// TestE2ERestartWithPendingScheduled: a delay-level message, a
// WithDelayTimestamp message and a relative TIMER_DELAY_MS message sent
// before a broker restart arrive after it, never early, once each.
func TestE2ERestartWithPendingScheduled(t *testing.T) {
	c := startCluster(t)
	topic := c.createTopic(testcluster.Uniq("Restart"), 2)
	p := newProducer(t, c)
	sent := time.Now()
	dues := map[string]time.Time{
		"level": sent.Add(3 * time.Second), "absolute": sent.Add(3500 * time.Millisecond),
		"relative": sent.Add(4 * time.Second),
	}
	send(t, p, primitive.NewMessage(topic, []byte("level")).WithDelayTimeLevel(2))
	send(t, p, primitive.NewMessage(topic, []byte("absolute")).WithDelayTimestamp(dues["absolute"]))
	rel := primitive.NewMessage(topic, []byte("relative"))
	rel.WithProperty(message.PropTimerDelayMs, "4000") // due >= sent + 4s
	send(t, p, rel)
	c.Restart()
	in := consume(t, c, testcluster.Uniq("cg"), topic, consumer.ConsumeSuccess)
	testcluster.WaitFor(t, 30*time.Second, "the scheduled messages", func() bool { return len(in.all()) >= len(dues) })
	for _, a := range in.all() {
		due, ok := dues[string(a.m.Body)]
		if !ok {
			t.Fatalf("unexpected or repeated delivery of %q", a.m.Body)
		}
		delete(dues, string(a.m.Body))
		if a.m.StoreTimestamp < due.UnixMilli() || wallBefore(a.at, due) {
			t.Errorf("%s delivered %dms early", a.m.Body, due.UnixMilli()-a.m.StoreTimestamp)
		}
	}
	// Whatever is delivered is in the topic; it must hold exactly these.
	var total int64
	for q := int32(0); q < 2; q++ {
		total += c.Store().MaxOffset(topic, q)
	}
	if total != 3 {
		t.Errorf("topic holds %d messages, want 3", total)
	}
}
