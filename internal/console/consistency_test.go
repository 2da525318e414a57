package console

import (
	"bufio"
	"context"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/broker"
)

// scrapeMetrics reads the cluster broker's /metrics into series -> value.
func (c *cluster) scrapeMetrics() map[string]float64 {
	c.t.Helper()
	rec := httptest.NewRecorder()
	c.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
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
			c.t.Fatalf("bad sample %q", line)
		}
		out[line[:i]] = v
	}
	return out
}

// The overview, the topics page (its API) and the keel_topics gauge count
// topics by the same rule: user topics apart from retry, dead-letter and
// system topics.
func TestTopicCountsAgreeEverywhere(t *testing.T) {
	c := startCluster(t, false)
	c.seed()
	var o overview
	c.getJSON("/api/overview", 200, &o)
	var all []admin.Topic
	c.getJSON("/api/topics?all=1", 200, &all)
	listed := map[string]int{}
	for _, tp := range all {
		listed[tp.Kind]++
	}
	s := c.scrapeMetrics()
	for _, kind := range []string{admin.KindNormal, admin.KindRetry, admin.KindDLQ, admin.KindSystem} {
		metric := s[`keel_topics{kind="`+kind+`"}`]
		if float64(o.TopicKinds[kind]) != metric || listed[kind] != o.TopicKinds[kind] {
			t.Errorf("%s topics: overview %d, topics API %d, keel_topics %v", kind, o.TopicKinds[kind], listed[kind], metric)
		}
	}
	if o.Topics != 1 || o.TopicKinds[admin.KindNormal] != 1 || o.TopicKinds[admin.KindRetry] != 1 || o.TopicKinds[admin.KindDLQ] != 1 {
		t.Errorf("overview counts %d %v, want 1 user topic (Orders), 1 retry, 1 DLQ", o.Topics, o.TopicKinds)
	}
	if o.TopicKinds[admin.KindSystem] < 1 {
		t.Errorf("no system topic counted: %v", o.TopicKinds)
	}
}

// The broker reports Keel's version apart from the RocketMQ protocol
// version, and its recent send and flush latency.
func TestRuntimeVersionAndLatency(t *testing.T) {
	c := startCluster(t, false)
	c.seed()
	var o overview
	c.getJSON("/api/overview", 200, &o)
	if len(o.Brokers) != 1 {
		t.Fatalf("brokers %+v", o.Brokers)
	}
	info := o.Brokers[0].Info
	if info["keelVersion"] != "v9.8.7-test" || info["brokerVersionDesc"] != "V4_9_4" {
		t.Errorf("versions: keel %q, protocol %q", info["keelVersion"], info["brokerVersionDesc"])
	}
	// seed sent 4 messages and stored a dead letter, each fsync'ed.
	if n, _ := strconv.Atoi(info["keelSendCount"]); n < 4 {
		t.Errorf("send count %q, want >= 4 (%v)", info["keelSendCount"], info)
	}
	p99, err := strconv.ParseFloat(info["keelSendLatencyP99Ms"], 64)
	if err != nil || p99 <= 0 {
		t.Errorf("send p99 %q: %v", info["keelSendLatencyP99Ms"], err)
	}
	// The store flushes on its own schedule: wait for a round.
	waitFor(t, "a flush in the runtime info", func() bool {
		rt, err := c.admin.Runtime(context.Background())
		if err != nil || len(rt) != 1 {
			return false
		}
		n, _ := strconv.Atoi(rt[0].Info["keelFlushCount"])
		p99, _ := strconv.ParseFloat(rt[0].Info["keelFlushLatencyP99Ms"], 64)
		return n >= 1 && p99 > 0
	})
}

// "Last consumed" on the group page showed the store time of the last
// consumed message: a minute old when the message waited a minute, though
// the group had just consumed it. The API now gives when the group's offset
// moved (the broker's clock, here a minute ahead of the store's) and how old
// the first unconsumed message is.
func TestLastConsumedIsWhenTheGroupConsumed(t *testing.T) {
	ahead := time.Now().Add(time.Minute)
	c := startCluster(t, false, func(bc *broker.Config) { bc.Now = func() time.Time { return ahead } })
	f := c.seed() // commits offset 1 of 4 on Orders/0
	var g groupView
	c.getJSON("/api/groups/"+f.group, 200, &g)
	var q0 *admin.QueueLag
	for i := range g.Queues {
		if g.Queues[i].Topic == f.topic && g.Queues[i].QueueID == 0 {
			q0 = &g.Queues[i]
		}
	}
	if q0 == nil {
		t.Fatalf("no queue 0 in %+v", g.Queues)
	}
	if q0.ConsumedAt != ahead.UnixMilli() {
		t.Errorf("consumedAt %d, want the commit's time %d (store time of the message: %d)", q0.ConsumedAt, ahead.UnixMilli(), q0.LastTimestamp)
	}
	if q0.LastTimestamp == 0 || q0.LastTimestamp > ahead.UnixMilli()-30_000 {
		t.Errorf("lastTimestamp %d should be the (earlier) store time", q0.LastTimestamp)
	}
	if q0.Lag != 3 || q0.OldestUnconsumed == 0 || q0.OldestUnconsumed > time.Now().UnixMilli() {
		t.Errorf("oldest unconsumed %d with lag %d", q0.OldestUnconsumed, q0.Lag)
	}
}
