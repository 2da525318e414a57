package metrics

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/doorstats"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// env is a broker on a real store behind a remoting server, with metrics
// served over HTTP.
type env struct {
	t      *testing.T
	st     *store.Store
	b      *broker.Broker
	srv    *remoting.Server
	m      *Metrics
	http   *httptest.Server
	client *remoting.Client
	dir    string // the store's directory
}

func startEnv(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	dir := t.TempDir()
	scfg := store.DefaultConfig(dir)
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.ConsumeQueueSegmentEntries = 1000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 1000, 4000
	// Every record read from its file (no read window, which would serve
	// the newest as written): the tests damage records at rest.
	scfg.ReadWindowBytes = -1
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bcfg := broker.DefaultConfig()
	bcfg.DataDir, bcfg.AdvertisedAddr = dir, ln.Addr().String()
	b, err := broker.New(bcfg, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	traffic := &doorstats.Counters{}
	srv := remoting.NewServer(remoting.ServerConfig{OnConnClose: b.OnConnClose, Traffic: traffic}, b.Handler())
	go srv.Serve(ln)
	e := &env{t: t, st: st, b: b, srv: srv, dir: dir}
	mcfg := Config{Sources: Sources{
		Broker: b, Store: st,
		Doors: func() []doorstats.Snapshot {
			return []doorstats.Snapshot{traffic.Snapshot(doorstats.RocketMQ), {Door: doorstats.Kafka, Open: 3, Accepted: 4, Requests: 9}}
		},
		DiskUsage:    func() (uint64, uint64, error) { return 1000, 250, nil },
		Transactions: func() TransactionStats { return TransactionStats{Pending: 2, Checks: 5} },
		AMQP:         func() []AMQPQueueStats { return []AMQPQueueStats{testAMQPQueue} },
	}}
	for _, o := range opts {
		o(&mcfg)
	}
	e.m = New(mcfg)
	e.http = httptest.NewServer(e.m.Handler())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if e.client, err = remoting.Dial(ctx, ln.Addr().String(), remoting.ClientConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.client.Close()
		e.http.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		b.Close()
		st.Close()
	})
	return e
}

func (e *env) invoke(code int16, ext map[string]string, body []byte) *remoting.Command {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := e.client.Invoke(ctx, remoting.NewRequest(code, ext, body))
	if err != nil {
		e.t.Fatal(err)
	}
	return resp
}

func (e *env) send(topic string, body string) *remoting.Command {
	return e.invoke(remoting.ReqSendMessage, map[string]string{
		"producerGroup": "pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": "4",
		"queueId": "0", "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
		"properties": "", "reconsumeTimes": "0", "unitMode": "false", "batch": "false",
	}, []byte(body))
}

// scrape fetches /metrics and returns every sample by its series text,
// e.g. `keel_consumer_lag{group="g",queue="0",topic="T"}`.
func (e *env) scrape() map[string]float64 {
	e.t.Helper()
	resp, err := http.Get(e.http.URL)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
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

// waitMetric polls /metrics until series has value want.
func (e *env) waitMetric(series string, want float64) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var got float64
	var ok bool
	for time.Now().Before(deadline) {
		if got, ok = e.scrape()[series]; ok && got == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("%s = %v (present %v), want %v", series, got, ok, want)
}

func (e *env) wantMetric(series string, want float64) {
	e.t.Helper()
	if got, ok := e.scrape()[series]; !ok || got != want {
		e.t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
	}
}

const heartbeat = `{"clientID":"c1","producerDataSet":[],"consumerDataSet":[{"groupName":"g","consumeType":"CONSUME_PASSIVELY",` +
	`"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"topic":"T",` +
	`"subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}`

func TestLagGrowsAndDrainsAndDLQCounts(t *testing.T) {
	e := startEnv(t)
	if r := e.invoke(remoting.ReqHeartBeat, nil, []byte(heartbeat)); r.Code != 0 {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
	for i := 0; i < 3; i++ {
		if r := e.send("T", "m"+strconv.Itoa(i)); r.Code != 0 {
			t.Fatalf("send: %d %s", r.Code, r.Remark)
		}
	}
	// Nobody consumes: the lag is every message sent.
	e.waitMetric(`keel_consumer_lag{group="g",queue="0",topic="T"}`, 3)
	e.wantMetric(`keel_consumer_group_lag{group="g",topic="T"}`, 3)
	e.wantMetric(`keel_send_requests_total{door="rocketmq",result="SUCCESS",topic="T"}`, 3)
	e.wantMetric(`keel_send_messages_total{door="rocketmq",result="SUCCESS",topic="T"}`, 3)
	e.wantMetric(`keel_send_bytes_total{door="rocketmq",topic="T"}`, 6)
	e.wantMetric(`keel_send_latency_seconds_count{door="rocketmq",outcome="ok"}`, 3)
	e.wantMetric(`keel_topic_messages{topic="T"}`, 3)
	e.wantMetric(`keel_consumers`, 1)
	e.wantMetric(`keel_connections{door="rocketmq"}`, 1)
	e.wantMetric(`keel_connections{door="kafka"}`, 3)
	e.wantMetric(`keel_door_connections_total{door="rocketmq"}`, 1)
	e.wantMetric(`keel_door_requests_total{door="kafka"}`, 9)
	if s := e.scrape(); s[`keel_door_requests_total{door="rocketmq"}`] < 4 || s[`keel_door_received_bytes_total{door="rocketmq"}`] == 0 ||
		s[`keel_door_sent_bytes_total{door="rocketmq"}`] == 0 {
		t.Errorf("rocketmq door: %v requests, %v bytes in, %v out", s[`keel_door_requests_total{door="rocketmq"}`],
			s[`keel_door_received_bytes_total{door="rocketmq"}`], s[`keel_door_sent_bytes_total{door="rocketmq"}`])
	}
	e.wantMetric(`keel_consumer_dlq_messages_total{group="g"}`, 0)

	// The consumer pulls everything and commits: the lag drops to 0.
	pull := e.invoke(remoting.ReqPullMessage, map[string]string{
		"consumerGroup": "g", "topic": "T", "queueId": "0", "queueOffset": "0", "maxMsgNums": "32",
		"sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "subVersion": "0",
		"expressionType": "TAG",
	}, nil)
	if pull.Code != 0 || pull.ExtFields["nextBeginOffset"] != "3" {
		t.Fatalf("pull: %d %s %v", pull.Code, pull.Remark, pull.ExtFields)
	}
	e.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": "3"}, nil)
	e.wantMetric(`keel_consumer_lag{group="g",queue="0",topic="T"}`, 0)
	e.wantMetric(`keel_consumer_offset{group="g",topic="T"}`, 3)
	e.wantMetric(`keel_pull_requests_total{group="g",result="SUCCESS"}`, 1)
	e.wantMetric(`keel_deliver_messages_total{door="rocketmq",topic="T"}`, 3)

	// A message returned with no retries left is a dead letter.
	res, err := e.st.GetMessage("T", 0, 1, 1, 1<<20, nil)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("get: %v", err)
	}
	phys := message.View(res.Records[0]).PhysOffset()
	res.Release()
	deadline := time.Now().Add(10 * time.Second)
	for e.st.VisibleOffset() <= phys && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // wait for the condition; send-back reads confirmed records only
	}
	r := e.invoke(remoting.ReqConsumerSendMsgBack, map[string]string{"group": "g", "offset": strconv.FormatInt(phys, 10),
		"delayLevel": "0", "maxReconsumeTimes": "0"}, nil)
	if r.Code != 0 {
		t.Fatalf("send back: %d %s", r.Code, r.Remark)
	}
	e.waitMetric(`keel_consumer_dlq_messages_total{group="g"}`, 1)
	e.wantMetric(`keel_consumer_dlq_messages{group="g"}`, 1)
}

func TestStoreDiskTransactionsAndFlushMetrics(t *testing.T) {
	e := startEnv(t)
	e.m.ObserveFlush(3*time.Millisecond, 4096)
	if r := e.send("T", "abc"); r.Code != 0 {
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	s := e.scrape()
	for series, want := range map[string]float64{
		`keel_store_flush_latency_seconds_count`: 1,
		`keel_store_flush_batch_bytes_sum`:       4096,
		`keel_disk_used_ratio`:                   0.75,
		`keel_disk_total_bytes`:                  1000,
		`keel_transaction_half_pending`:          2,
		`keel_transaction_checks_total`:          5,
		`keel_store_writable`:                    1,
		`keel_broker_registered`:                 1, // no NameServers configured
		`keel_store_put_messages_total`:          1,
	} {
		if got, ok := s[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if s[`keel_commitlog_bytes`] <= 0 || s[`keel_commitlog_written_offset_bytes`] != s[`keel_commitlog_bytes`] {
		t.Errorf("commitlog bytes %v written %v", s[`keel_commitlog_bytes`], s[`keel_commitlog_written_offset_bytes`])
	}
	// A send to a topic the broker does not have is labelled _other.
	if r := e.send("SCHEDULE_TOPIC_XXXX", "x"); r.Code != remoting.ResNoPermission {
		t.Fatalf("send to a system topic: %d", r.Code)
	}
	e.wantMetric(`keel_send_requests_total{door="rocketmq",result="NO_PERMISSION",topic="_other"}`, 1)
	e.wantMetric(`keel_send_latency_seconds_count{door="rocketmq",outcome="error"}`, 1)
	e.wantMetric(`keel_door_errors_total{door="rocketmq"}`, 1)
}

func TestLagSeriesAreBounded(t *testing.T) {
	e := startEnv(t)
	e.m.cfg.MaxLagSeries = 2
	if r := e.invoke(remoting.ReqHeartBeat, nil, []byte(heartbeat)); r.Code != 0 {
		t.Fatalf("heartbeat: %d %s", r.Code, r.Remark)
	}
	e.send("T", "x")
	e.waitMetric(`keel_consumer_group_lag{group="g",topic="T"}`, 1)
	n := 0
	for series := range e.scrape() {
		if strings.HasPrefix(series, "keel_consumer_lag{") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d lag series, want 2", n)
	}
	e.wantMetric(`keel_consumer_lag_series_dropped`, 2) // T has 4 queues
}

// rocketMQNotExported are rocketmq-exporter names docs/metrics.md names
// but Keel does not export (a recording rule's output; series it says are
// not offered).
var rocketMQNotExported = map[string]bool{
	"rocketmq_message_accumulation": true, "rocketmq_group_count": true, "rocketmq_send_back_nums": true, "rocketmq_group_get_latency": true, "rocketmq_client_consume": true,
	"rocketmq_client_consumer_pull": true, "rocketmq_brokeruntime": true, "rocketmq_brokeruntime_put_latency_99": true,
}

// TestDocumentedMetricsExist checks that every keel_ (and, with
// RocketMQNames, rocketmq_) metric named in docs/metrics.md, the alert
// rules and the Grafana dashboard is exported, and that every exported one
// is documented.
func TestDocumentedMetricsExist(t *testing.T) {
	// The replication gauges of a master and of a slave, one scrape each.
	repl := masterReplication
	e := startEnv(t, func(c *Config) {
		c.RocketMQNames = true
		c.Replication = func() ReplicationStats { return repl }
		c.NetLimits = func() NetLimitStats { return sampleNetLimits }
		c.Controlled = func() ControlledStats { return sampleControlled }
	})
	e.invoke(remoting.ReqHeartBeat, nil, []byte(heartbeat))
	e.send("T", "x")
	// Pull until the message is delivered (it is found once dispatched):
	// keel_deliver_messages_total has a series from then on.
	deadline := time.Now().Add(10 * time.Second)
	for e.invoke(remoting.ReqPullMessage, map[string]string{"consumerGroup": "g", "topic": "T", "queueId": "0", "queueOffset": "0",
		"maxMsgNums": "1", "sysFlag": "0", "commitOffset": "0", "suspendTimeoutMillis": "0", "subscription": "*", "expressionType": "TAG"},
		nil).Code != remoting.ResSuccess {
		if time.Now().After(deadline) {
			t.Fatal("the message sent was not pulled within 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	e.m.ObserveFlush(time.Millisecond, 100)
	// Progress on the group's retry and dead-letter topics, for their diffs.
	for _, topic := range []string{broker.RetryTopic("g"), broker.DLQTopic("g")} {
		if _, err := e.b.EnsureTopic(topic, 1, 6); err != nil {
			t.Fatal(err)
		}
		e.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": topic, "queueId": "0", "commitOffset": "0"}, nil)
	}
	exported := map[string]bool{}
	for _, r := range []ReplicationStats{masterReplication, slaveReplication} {
		repl = r
		for series := range e.scrape() {
			name, _, _ := strings.Cut(series, "{")
			if strings.HasPrefix(name, "keel_") || strings.HasPrefix(name, "rocketmq_") {
				exported[familyName(name)] = true
			}
		}
	}
	// A controller process's metrics.
	ctl := NewController(func() ControllerStats { return sampleController }, func() time.Time { return ctlNow }, false)
	for series := range scrapeHandler(t, ctl.Handler()) {
		name, _, _ := strings.Cut(series, "{")
		exported[familyName(name)] = true
	}
	nameRE := regexp.MustCompile(`(keel|rocketmq)_[a-z_0-9]*[a-z0-9]`)
	documented := map[string]bool{}
	for _, f := range []string{"../../docs/metrics.md", "../../docs/alerts.yml", "../../docs/grafana/keel.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nameRE.FindAllString(string(b), -1) {
			n = familyName(n)
			if f == "../../docs/metrics.md" {
				documented[n] = true
			}
			if !exported[n] && !rocketMQNotExported[n] {
				t.Errorf("%s names %s, which is not exported", f, n)
			}
		}
	}
	for n := range exported {
		if !documented[n] {
			t.Errorf("%s is exported but not in docs/metrics.md", n)
		}
	}
}

// familyName strips a histogram series suffix.
func familyName(n string) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(n, suf); ok && (strings.HasSuffix(b, "_seconds") || strings.HasSuffix(b, "_bytes")) {
			return b
		}
	}
	return n
}

// keel_topics counts topics by kind, as the console does: a user topic, the
// group's retry and dead-letter topics and the broker's system topics are
// separate numbers.
func TestTopicsByKind(t *testing.T) {
	e := startEnv(t)
	before := e.scrape()
	if r := e.send("T", "x"); r.Code != 0 { // auto-created from TBW102
		t.Fatalf("send: %d %s", r.Code, r.Remark)
	}
	e.invoke(remoting.ReqHeartBeat, nil, []byte(heartbeat)) // creates %RETRY%g
	e.waitMetric(`keel_topics{kind="retry"}`, before[`keel_topics{kind="retry"}`]+1)
	e.wantMetric(`keel_topics{kind="normal"}`, before[`keel_topics{kind="normal"}`]+1)
	e.wantMetric(`keel_topics{kind="dlq"}`, 0)
	s := e.scrape()
	if s[`keel_topics{kind="system"}`] < 1 { // TBW102 at least
		t.Errorf("system topics %v", s[`keel_topics{kind="system"}`])
	}
	var sum float64
	for _, k := range []string{"normal", "retry", "dlq", "system"} {
		sum += s[`keel_topics{kind="`+k+`"}`]
	}
	if want := float64(len(e.b.Topics())); sum != want {
		t.Errorf("keel_topics sums to %v, the broker has %v topics", sum, want)
	}
}

// Every rule of docs/alerts.yml has an expression and a severity and is
// in docs/metrics.md's table of alerts, and the table lists no rule that
// does not exist (the metric names of the rules are checked by
// TestDocumentedMetricsExist).
func TestAlertRulesDocumented(t *testing.T) {
	rules, err := os.ReadFile("../../docs/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	alertRE := regexp.MustCompile(`(?m)^      - alert: (\w+)$`)
	idx := alertRE.FindAllStringSubmatchIndex(string(rules), -1)
	if len(idx) == 0 {
		t.Fatal("no rules in docs/alerts.yml")
	}
	inRules := map[string]bool{}
	for i, m := range idx {
		name := string(rules[m[2]:m[3]])
		end := len(rules)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		body := string(rules[m[1]:end])
		if inRules[name] {
			t.Errorf("rule %s twice", name)
		}
		inRules[name] = true
		if !regexp.MustCompile(`(?m)^        expr: \S`).MatchString(body) {
			t.Errorf("rule %s has no expr", name)
		}
		if !regexp.MustCompile(`(?m)^        labels: \{severity: (critical|warning|info)\}$`).MatchString(body) {
			t.Errorf("rule %s has no severity (critical, warning or info)", name)
		}
		if !strings.Contains(body, "summary: ") {
			t.Errorf("rule %s has no summary", name)
		}
		if !strings.Contains(string(doc), "| `"+name+"` |") {
			t.Errorf("rule %s is not in docs/metrics.md's table of alerts", name)
		}
	}
	for _, m := range regexp.MustCompile("(?m)^\\| `(Keel\\w+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		if !inRules[m[1]] {
			t.Errorf("docs/metrics.md lists alert %s, which docs/alerts.yml does not have", m[1])
		}
	}
}
