package metrics

import (
	"bufio"
	"context"
	"math"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/testcluster"
)

// compatEnv is an in-process NameServer and broker (testcluster) with
// metrics on a clock the test moves, and a client connection.
type compatEnv struct {
	t     *testing.T
	tc    *testcluster.Cluster
	m     *Metrics
	cl    *remoting.Client
	clock atomic.Int64 // Unix ns
}

func startCompat(t *testing.T, rocketMQNames bool) *compatEnv {
	e := &compatEnv{t: t, tc: testcluster.Start(t)}
	e.clock.Store(time.Now().UnixNano())
	e.m = New(Config{Sources: Sources{Broker: e.tc.Broker(), Store: e.tc.Store()}, RocketMQNames: rocketMQNames,
		Now: func() time.Time { return time.Unix(0, e.clock.Load()) }})
	e.tc.CreateTopic("Orders", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, e.tc.BrokerAddr(), remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	e.cl = cl
	return e
}

func (e *compatEnv) advance(d time.Duration) { e.clock.Add(int64(d)) }

// sample takes the rates' samples at the test's clock (what Run does every
// 10 s).
func (e *compatEnv) sample() { e.m.SampleRates(time.Unix(0, e.clock.Load())) }

func (e *compatEnv) invoke(code int16, ext map[string]string, body []byte) *remoting.Command {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.cl.Invoke(ctx, remoting.NewRequest(code, ext, body))
	if err != nil || resp.Code != remoting.ResSuccess {
		e.t.Fatalf("%s: %v %+v", remoting.RequestCode(code), err, resp)
	}
	return resp
}

func (e *compatEnv) send(n int, body string) {
	e.t.Helper()
	for i := 0; i < n; i++ {
		e.invoke(remoting.ReqSendMessage, map[string]string{
			"producerGroup": "pg", "topic": "Orders", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
			"queueId": "0", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
			"properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
		}, []byte(body))
	}
}

func (e *compatEnv) commit(offset int64) {
	e.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "billing", "topic": "Orders",
		"queueId": "0", "commitOffset": strconv.FormatInt(offset, 10)}, nil)
}

func (e *compatEnv) waitStored(n int64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for e.tc.Store().MaxOffset("Orders", 0) < n {
		if time.Now().After(deadline) {
			e.t.Fatalf("Orders/0 has %d messages, want %d", e.tc.Store().MaxOffset("Orders", 0), n)
		}
		time.Sleep(5 * time.Millisecond) // wait for the condition: dispatch
	}
}

func (e *compatEnv) scrape() map[string]float64 {
	e.t.Helper()
	rec := httptest.NewRecorder()
	e.m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			e.t.Fatalf("bad sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

const billingHeartbeat = `{"clientID":"10.0.0.7@billing-1","producerDataSet":[],"consumerDataSet":[{"groupName":"billing",` +
	`"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",` +
	`"subscriptionDataSet":[{"topic":"Orders","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}`

// want checks series (with rocketmq-exporter's exact label sets) against
// values, within tol.
func want(t *testing.T, s map[string]float64, tol float64, series map[string]float64) {
	t.Helper()
	for k, w := range series {
		got, ok := s[k]
		if !ok || math.Abs(got-w) > tol {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, w)
		}
	}
}

func TestRocketMQExporterNames(t *testing.T) {
	e := startCompat(t, true)
	e.invoke(remoting.ReqHeartBeat, nil, []byte(billingHeartbeat))
	e.send(6, "abcd")
	e.waitStored(6)
	e.commit(2)
	adv := e.tc.AdvertisedAddr()
	const lbl = `broker="broker-a",cluster="DefaultCluster"`
	storeTime := func(off int64) time.Time {
		res, err := e.tc.Store().GetMessage("Orders", 0, off, 1, 1<<20, nil)
		if err != nil || len(res.Records) != 1 {
			t.Fatalf("get %d: %v", off, err)
		}
		defer res.Release()
		return time.UnixMilli(message.View(res.Records[0]).StoreTimestamp())
	}
	e.advance(90 * time.Second) // the oldest unconsumed message (offset 2) waits 90 s
	age := time.Unix(0, e.clock.Load()).Sub(storeTime(2)).Seconds()
	s := e.scrape()
	want(t, s, 0, map[string]float64{
		`rocketmq_producer_offset{` + lbl + `,topic="Orders"}`:                                        6,
		`rocketmq_consumer_offset{` + lbl + `,group="billing",topic="Orders"}`:                        2,
		`rocketmq_group_diff{countOfOnlineConsumers="1",group="billing",msgModel="1",topic="Orders"}`: 4,
		`rocketmq_broker_tps{broker="broker-a",brokerIP="` + adv + `",cluster="DefaultCluster"}`:      0, // no sample yet
		`rocketmq_producer_tps{` + lbl + `,topic="Orders"}`:                                           0,
		`rocketmq_consumer_tps{` + lbl + `,group="billing",topic="Orders"}`:                           0,
		`rocketmq_group_consume_tps{` + lbl + `,group="billing",topic="Orders"}`:                      0,
		`rocketmq_producer_message_size{` + lbl + `,topic="Orders"}`:                                  0,
		`rocketmq_broker_qps{broker="broker-a",brokerIP="` + adv + `",cluster="DefaultCluster"}`:      0,
		`keel_consumer_group_lag{group="billing",topic="Orders"}`:                                     4,
		`rocketmq_producer_offset{` + lbl + `,topic="TBW102"}`:                                        0, // system topics too, as the exporter
	})
	want(t, s, 0.01, map[string]float64{
		`rocketmq_group_get_latency_by_storetime{` + lbl + `,group="billing",topic="Orders"}`: age * 1000,
		`keel_group_oldest_unconsumed_age_seconds{group="billing",topic="Orders"}`:            age,
	})

	// The first sample: the in-memory counters (messages and bytes sent,
	// stored and read) started at zero a tick before it, as RocketMQ's
	// statistics items do; the committed offsets start at their sample.
	e.sample()
	// 30 s later: 6 more messages stored, the group consumed 6.
	e.send(6, "abcd")
	e.waitStored(12)
	e.commit(8)
	e.advance(30 * time.Second)
	e.sample()
	s = e.scrape()
	want(t, s, 1e-9, map[string]float64{
		`rocketmq_producer_offset{` + lbl + `,topic="Orders"}`:                                        12,
		`rocketmq_producer_tps{` + lbl + `,topic="Orders"}`:                                           12.0 / 40,
		`rocketmq_producer_message_size{` + lbl + `,topic="Orders"}`:                                  12.0 * 4 / 40,
		`rocketmq_broker_tps{broker="broker-a",brokerIP="` + adv + `",cluster="DefaultCluster"}`:      12.0 / 40,
		`rocketmq_consumer_tps{` + lbl + `,group="billing",topic="Orders"}`:                           6.0 / 30,
		`rocketmq_consumer_message_size{` + lbl + `,group="billing",topic="Orders"}`:                  6.0 / 30 * 4, // 4-byte bodies
		`rocketmq_group_consume_tps{` + lbl + `,group="billing",topic="Orders"}`:                      6.0 / 30,
		`rocketmq_consumer_offset{` + lbl + `,group="billing",topic="Orders"}`:                        8,
		`rocketmq_group_diff{countOfOnlineConsumers="1",group="billing",msgModel="1",topic="Orders"}`: 4,
	})

	// Caught up: no latency, no age; a dead letter shows in the DLQ offset
	// and the group's DLQ diff.
	e.commit(12)
	res, err := e.tc.Store().GetMessage("Orders", 0, 11, 1, 1<<20, nil)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("get: %v", err)
	}
	phys := message.View(res.Records[0]).PhysOffset()
	res.Release()
	deadline := time.Now().Add(10 * time.Second)
	for e.tc.Store().VisibleOffset() <= phys && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // wait for the condition; send-back reads confirmed records only
	}
	e.invoke(remoting.ReqConsumerSendMsgBack, map[string]string{"group": "billing", "offset": strconv.FormatInt(phys, 10),
		"delayLevel": "0", "maxReconsumeTimes": "0"}, nil)
	deadline = time.Now().Add(10 * time.Second)
	for e.tc.Store().MaxOffset("%DLQ%billing", 0) < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // wait for the condition: the dead letter's dispatch
	}
	s = e.scrape()
	want(t, s, 0, map[string]float64{
		`rocketmq_group_get_latency_by_storetime{` + lbl + `,group="billing",topic="Orders"}`:         0,
		`keel_group_oldest_unconsumed_age_seconds{group="billing",topic="Orders"}`:                    0,
		`rocketmq_group_diff{countOfOnlineConsumers="1",group="billing",msgModel="1",topic="Orders"}`: 0,
		`rocketmq_topic_dlq_offset{` + lbl + `,group="billing"}`:                                      1,
		`rocketmq_topic_retry_offset{` + lbl + `,topic="%RETRY%billing"}`:                             0,
	})
}

// Without the option /metrics has Keel's names only, and the oldest
// unconsumed age is Keel's own (always there).
func TestRocketMQNamesOffByDefault(t *testing.T) {
	e := startCompat(t, false)
	e.invoke(remoting.ReqHeartBeat, nil, []byte(billingHeartbeat))
	e.send(1, "x")
	e.waitStored(1)
	e.advance(10 * time.Second)
	s := e.scrape()
	for k := range s {
		if strings.HasPrefix(k, "rocketmq_") {
			t.Errorf("%s exported without RocketMQNames", k)
		}
	}
	if age := s[`keel_group_oldest_unconsumed_age_seconds{group="billing",topic="Orders"}`]; age < 9 || age > 20 {
		t.Errorf("oldest unconsumed age %v, want about 10 s", age)
	}
}

// The age reads one message per lagging queue, at most MaxLagSeries a
// scrape; a topic whose lagging queues were not all read gets no age
// rather than a wrong one.
func TestOldestUnconsumedAgeBudget(t *testing.T) {
	e := startCompat(t, false)
	e.m.cfg.MaxLagSeries = 1
	e.invoke(remoting.ReqHeartBeat, nil, []byte(billingHeartbeat))
	e.send(1, "x") // Orders/0
	e.waitStored(1)
	s := e.scrape()
	if _, ok := s[`keel_group_oldest_unconsumed_age_seconds{group="billing",topic="Orders"}`]; !ok {
		t.Fatalf("one lagging queue within the budget: no age in %v", s)
	}
	e.invoke(remoting.ReqSendMessage, map[string]string{
		"producerGroup": "pg", "topic": "Orders", "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": "1", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
		"properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
	}, []byte("y"))
	deadline := time.Now().Add(10 * time.Second)
	for e.tc.Store().MaxOffset("Orders", 1) < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // wait for the condition: dispatch
	}
	if v, ok := e.scrape()[`keel_group_oldest_unconsumed_age_seconds{group="billing",topic="Orders"}`]; ok {
		t.Errorf("two lagging queues, budget 1: age %v reported", v)
	}
}

// TestProducerTPSFirstBurst: a new topic's first burst shows at the next
// sampling tick and decays as it ages through the minute, whatever the
// scrapes' timing, as RocketMQ's TopicPutNums minute statistics (what
// rocketmq-exporter reports): 20 messages read 20/10, 20/20, ... 20/60,
// then 0 once the minute no longer holds them.
func TestProducerTPSFirstBurst(t *testing.T) {
	e := startCompat(t, true)
	const series = `rocketmq_producer_tps{broker="broker-a",cluster="DefaultCluster",topic="Orders"}`
	e.sample() // a tick before the topic's first message
	e.send(20, "x")
	e.waitStored(20)
	if got := e.scrape()[series]; got != 0 {
		t.Fatalf("before the next tick: %v, want 0", got)
	}
	for i, want := range []float64{20.0 / 10, 20.0 / 20, 20.0 / 30, 20.0 / 40, 20.0 / 50, 20.0 / 60, 0, 0} {
		e.advance(statsTick)
		e.sample()
		for range 2 { // scrapes between ticks read the same value
			e.advance(time.Second)
			if got := e.scrape()[series]; math.Abs(got-want) > 1e-9 {
				t.Fatalf("tick %d: %v, want %v", i+1, got, want)
			}
		}
		e.advance(-2 * time.Second)
	}
}
