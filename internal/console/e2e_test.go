package console

// End-to-end test of the console in headless Chromium: every page is loaded
// against a live NameServer and broker with data, its rendered DOM is
// checked for the data it must show, and a screenshot is saved.
//
// It drives the Chromium command line (--headless --dump-dom, then
// --screenshot), so it needs no Go module beyond the standard library. It is
// skipped when no Chromium binary is found (install Debian's `chromium`
// package, or set KEEL_CHROMIUM to a binary). Screenshots go to a temporary
// directory, or to $KEEL_CONSOLE_SCREENSHOTS (docs/console is refreshed with
// KEEL_CONSOLE_SCREENSHOTS=$PWD/docs/console go test -run TestConsoleInChromium ./internal/console).

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/replication"
)

// chromiumPath finds a Chromium binary.
func chromiumPath() string {
	if p := os.Getenv("KEEL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

type browser struct {
	t       *testing.T
	bin     string
	profile string
	size    string // window size, width,height (default 1366,900)
}

// run runs Chromium headless on url with extra arguments, bounded in time.
func (b *browser) run(url string, extra ...string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	size := b.size
	if size == "" {
		size = "1366,900"
	}
	args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--hide-scrollbars", "--user-data-dir=" + b.profile, "--window-size=" + size,
		"--virtual-time-budget=10000"}, extra...)
	cmd := exec.CommandContext(ctx, b.bin, append(args, url)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		b.t.Fatalf("chromium %s: %v\n%s", url, err, errOut.String())
	}
	return out.String()
}

// stepClock is a clock the test advances by hand.
type stepClock struct{ ns atomic.Int64 }

func (c *stepClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *stepClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// history fills the console's history with a few samples 10 s apart while
// traffic flows, so the charts have something to draw.
func (c *cluster) history(f fixture) {
	c.t.Helper()
	clock := &stepClock{}
	clock.ns.Store(time.Now().Add(-time.Minute).UnixNano())
	c.console.cfg.Now = clock.Now
	c.console.hist = &history{max: DefaultHistoryPoints} // drop samples taken on the real clock
	ctx := context.Background()
	for round := 0; round < 6; round++ {
		for i := 0; i < round*3; i++ {
			body := `{"order":` + strconv.Itoa(100+round*10+i) + `}`
			if _, err := c.admin.Send(ctx, admin.SendSpec{Topic: f.topic, Tags: "created", Body: []byte(body), QueueID: 1}); err != nil {
				c.t.Fatal(err)
			}
		}
		c.console.SampleOnce(ctx)
		clock.Advance(10 * time.Second)
	}
}

func TestConsoleInChromium(t *testing.T) {
	bin := chromiumPath()
	if bin == "" {
		t.Skip("no Chromium binary found (apt-get install chromium, or set KEEL_CHROMIUM): console e2e test skipped")
	}
	shots := os.Getenv("KEEL_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	var repl atomic.Pointer[replication.Master]
	c := startCluster(t, true, withReplication(&repl))
	f := c.seed()
	c.history(f)
	b := &browser{t: t, bin: bin, profile: t.TempDir()}

	pages := []struct {
		name, hash string
		want       []string
	}{
		{"overview", "#/overview", []string{"Overview", "broker-a", "Messages stored", "Dead letters", "<svg class=\"chart\"", "write access",
			"User topics", "1 retry · 1 dead-letter · ", "v9.8.7-test", "V4_9_4", "Send p99", "Flush p99"}},
		{"topics", "#/topics", []string{"Topics", `href="#/topics/Orders"`, "%DLQ%billing", "Create topic",
			`id="topic-counts">1 user topic · 1 retry · 1 dead-letter · `, "(system topics hidden)"}},
		{"topic", "#/topics/Orders", []string{"Orders", "Min offset", "Queues", "Browse messages stored from", `type="datetime-local"`}},
		{"topic-browse", "#/topics/Orders?from=1", []string{`id="browse"`, "Messages stored from 1970-01-01", "oldest first",
			f.sent[0].MsgID, "order-40", "order-43"}},
		{"groups", "#/groups", []string{`href="#/groups/billing"`, "CLUSTERING", ">Retry lag<"}},
		{"group", "#/groups/billing", []string{"Lag per queue", "10.0.0.7@billing-1", "Lag trend", "<svg class=\"chart\"",
			"Last consumed", "Oldest unconsumed", `behind</span>`, `title="the last consumed message was stored `}},
		{"messages", "#/messages?topic=Orders&key=" + url.QueryEscape(f.key), []string{f.sent[2].MsgID, "order-42", "19.90", "UNIQ_KEY"}},
		{"message", "#/messages?id=" + f.sent[0].MsgID, []string{f.sent[0].OffsetMsgID, "order-40", "Hex"}},
		{"dlq", "#/dlq/billing", []string{"Dead letters of billing", f.deadID, "Resend all pending"}},
		{"transactions", "#/transactions", []string{"Pending transactions"}},
		{"corrupt", "#/corrupt", []string{"Corrupt records", "No corrupt record has been isolated.", "Scrubber", "broker-a"}},
		{"replication-none", "#/replication", []string{"<h1>Replication", "0 of 1 broker group replicated", "not replicated", "0 (master)"}},
	}
	for _, p := range pages {
		png := filepath.Join(shots, p.name+".png")
		dom := b.run(c.http.URL+"/"+p.hash, "--dump-dom", "--screenshot="+png)
		if strings.Contains(dom, `class="err"`) {
			t.Errorf("%s: the page shows an error:\n%s", p.name, excerpt(dom, `class="err"`))
		}
		for _, w := range p.want {
			if !strings.Contains(dom, w) {
				t.Errorf("%s (%s): page lacks %q:\n%s", p.name, p.hash, w, excerpt(dom, `<main`))
			}
		}
		if st, err := os.Stat(png); err != nil || st.Size() < 5000 {
			t.Errorf("%s: screenshot %s missing or empty: %v", p.name, png, err)
		}
	}
	// A missing topic or group gets a titled page and a sentence, not the
	// route's name and an "admin:" error.
	for _, m := range []struct{ hash, title, heading, text string }{
		{"#/topics/NoSuchTopic", "Topic NoSuchTopic", `<h1>Topic NoSuchTopic <span class="sub">not found</span></h1>`,
			`There is no topic named "NoSuchTopic" on any broker`},
		{"#/groups/nobody", "Consumer group nobody", `<h1>Consumer group nobody <span class="sub">not found</span></h1>`,
			`knows a consumer group named "nobody"`},
	} {
		dom := b.run(c.http.URL+"/"+m.hash, "--dump-dom")
		for _, w := range []string{m.heading, m.text, "<title>" + m.title + " · Keel console</title>"} {
			if !strings.Contains(dom, w) {
				t.Errorf("%s: page lacks %q:\n%s", m.hash, w, excerpt(dom, "<main"))
			}
		}
		if strings.Contains(dom, "admin:") {
			t.Errorf("%s: page shows a Go package prefix:\n%s", m.hash, excerpt(dom, "<main"))
		}
	}

	// The broker becomes the master of a group with a slave that follows
	// it: the replication page shows both and the master's view of the
	// slave.
	c.startReplication(&repl)
	dom := b.run(c.http.URL+"/#/replication", "--dump-dom", "--screenshot="+filepath.Join(shots, "replication.png"))
	for _, w := range []string{"1 of 1 broker group replicated", "ASYNC_MASTER, 2 of 2 copies in sync", ">ASYNC_MASTER<",
		`<span class="pill ok">in sync</span>`, "connected, not registered", ">0 B<", ">0 ms<", " s ago"} {
		if !strings.Contains(dom, w) {
			t.Errorf("replication page lacks %q:\n%s", w, excerpt(dom, `<main`))
		}
	}

	// A record corrupted at rest and isolated by a read shows on the
	// corrupt-records page.
	c.corruptAndIsolate(f, 1)
	dom = b.run(c.http.URL+"/#/corrupt", "--dump-dom", "--screenshot="+filepath.Join(shots, "corrupt.png"))
	for _, w := range []string{`href="#/topics/Orders"`, "1 isolated", ">read<", "crc"} {
		if !strings.Contains(dom, w) {
			t.Errorf("corrupt page lacks %q:\n%s", w, excerpt(dom, `<main`))
		}
	}

	// The Kafka door's groups, members and connections, and a group as
	// kafka-consumer-groups.sh --describe shows it; the AMQP page's
	// queues and connections fit a 1400-pixel window.
	c.kafkaAndAMQP()
	dom = b.run(c.http.URL+"/#/kafka", "--dump-dom", "--screenshot="+filepath.Join(shots, "kafka.png"))
	for _, w := range []string{"<h1>Kafka", "1 consumer group, 1 connection", `href="#/kafka/etl"`, ">Stable<", ">cooperative-sticky<",
		"etl-1-4f2a", "10.0.0.9", "Orders [0, 1]", "10.0.0.9:51234", ">etl-1<"} {
		if !strings.Contains(dom, w) {
			t.Errorf("Kafka page lacks %q:\n%s", w, excerpt(dom, `<main`))
		}
	}
	dom = b.run(c.http.URL+"/#/kafka/etl", "--dump-dom", "--screenshot="+filepath.Join(shots, "kafka-group.png"))
	for _, w := range []string{"Kafka group etl", "as kafka-consumer-groups.sh --describe", "Log end offset", `href="#/topics/Orders"`,
		"etl-1-4f2a", ">etl-1<", `<div class="label">Members</div><div class="value ">1</div>`} {
		if !strings.Contains(dom, w) {
			t.Errorf("Kafka group page lacks %q:\n%s", w, excerpt(dom, `<main`))
		}
	}
	if strings.Contains(dom, `class="err"`) {
		t.Errorf("Kafka group page shows an error:\n%s", excerpt(dom, `class="err"`))
	}
	wide := &browser{t: t, bin: bin, profile: t.TempDir(), size: "1400,900"}
	dom = wide.run(c.http.URL+"/#/amqp", "--dump-dom", "--screenshot="+filepath.Join(shots, "amqp.png"))
	for _, w := range []string{"1 queue, 1,234,567 messages ready, 1 connection", "10.0.0.8:40000", ">guest<", `id="amqp-connections"`, "Dead-lettered / dropped"} {
		if !strings.Contains(dom, w) {
			t.Errorf("AMQP page lacks %q:\n%s", w, excerpt(dom, `<main`))
		}
	}

	// A second member of broker-a registers (brokerId 1, its address a
	// second listener of the same broker): the latency table names each member by its role, not
	// twice "broker-a".
	c.registerSecondMember()
	dom = b.run(c.http.URL+"/#/overview", "--dump-dom")
	for _, w := range []string{`<td class="">broker-a <span class="muted">master</span></td>`, `<td class="">broker-a <span class="muted">slave 1</span></td>`} {
		if !strings.Contains(dom, w) {
			t.Errorf("latency table lacks %q:\n%s", w, excerpt(dom, `id="latency"`))
		}
	}

	// The group page shows the group's lag as the API computes it.
	d, err := c.admin.DescribeGroup(context.Background(), f.group)
	if err != nil || d.Lag < 3 {
		t.Fatalf("group %+v: %v", d, err)
	}
	dom = b.run(c.http.URL+"/#/groups/billing", "--dump-dom")
	want := fmt.Sprintf(`<div class="label">Lag</div><div class="value bad">%s</div>`, thousands(d.Lag))
	if !strings.Contains(dom, want) || !strings.Contains(dom, `<span class="lag">3<span`) {
		t.Errorf("group page does not show lag %d (and 3 on queue 0):\n%s", d.Lag, excerpt(dom, "cards"))
	}
}

// thousands formats n as the page does (en-US grouping).
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// excerpt returns up to 3000 characters of s from the first marker.
func excerpt(s, marker string) string {
	i := strings.Index(s, marker)
	if i < 0 {
		i = 0
	}
	return fmt.Sprintf("%.3000s", s[i:])
}

// kafkaAndAMQP installs a Kafka door's report (a group "etl" with one
// member assigned Orders' two partitions, one connection) and an AMQP
// door's (a queue with every flag, one connection), as the wiring does.
func (c *cluster) kafkaAndAMQP() {
	member := admin.KafkaMember{MemberID: "etl-1-4f2a9c0e11d2b3a4", ClientID: "etl-1", Host: "10.0.0.9",
		Assignment: []admin.KafkaAssignment{{Topic: "Orders", Partitions: []int32{0, 1}}}}
	group := admin.KafkaGroup{Name: "etl", State: "Stable", ProtocolType: "consumer", Protocol: "cooperative-sticky",
		Generation: 3, Leader: member.MemberID, Members: []admin.KafkaMember{member}}
	conn := admin.KafkaConnection{Remote: "10.0.0.9:51234", ClientID: "etl-1", SinceMs: time.Now().Add(-time.Minute).UnixMilli(), Requests: 42}
	c.b.SetKafka(&broker.KafkaHooks{
		Info: func() any {
			return struct {
				Groups      []admin.KafkaGroup      `json:"groups"`
				Connections []admin.KafkaConnection `json:"connections"`
			}{[]admin.KafkaGroup{group}, []admin.KafkaConnection{conn}}
		},
		Members: func(g string) []broker.KafkaMember {
			if g != "etl" {
				return nil
			}
			return []broker.KafkaMember{{ID: member.MemberID, Host: member.Host, Topics: []string{"Orders"}}}
		},
	})
	q := admin.AMQPQueue{Vhost: "/", Name: "orders.created.by-the-webshop-service.for-billing", Type: "quorum", Durable: true,
		AutoDelete: true, Ready: 1234567, Unacked: 12345, Consumers: 12, MessageTTLMs: 86400000, MaxLength: 1000000,
		DeliveryLimit: 5, DeadLetterExchange: "orders.dead-letters", OldestUnsettledAgeMs: 90000,
		Published: 123456789, Delivered: 123456000, Acked: 123400000, DeadLettered: 1234, Dropped: 56}
	ac := admin.AMQPConnection{Remote: "10.0.0.8:40000", User: "guest", Vhost: "/", Channels: 2, SinceMs: time.Now().UnixMilli()}
	c.b.SetAMQPInfo(func() (any, any, any) {
		return []admin.AMQPQueue{q}, []admin.AMQPExchange{}, []admin.AMQPConnection{ac}
	})
}

// registerSecondMember registers broker-a's member 1 with the NameServer,
// at a second listener of the broker (which answers its runtime info).
func (c *cluster) registerSecondMember() {
	c.t.Helper()
	addr := serve(c.t, c.b.Handler(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, c.namesrv, remoting.ClientConfig{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() }) // the NameServer drops what a closed connection registered
	body := []byte(`{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"timestamp":1,"counter":0},"topicConfigTable":{}}}`)
	resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqRegisterBroker, map[string]string{"clusterName": "DefaultCluster",
		"brokerName": "broker-a", "brokerAddr": addr, "brokerId": "1", "haServerAddr": ""}, body))
	if err != nil || resp.Code != remoting.ResSuccess {
		c.t.Fatalf("register member 1: %v %+v", err, resp)
	}
}
