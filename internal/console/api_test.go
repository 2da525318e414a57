package console

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/admin"
)

func (c *cluster) getJSON(path string, want int, v any) {
	c.t.Helper()
	resp, err := c.get(path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		c.t.Fatalf("GET %s: %d, want %d: %s", path, resp.StatusCode, want, body)
	}
	if v != nil {
		if err := json.Unmarshal(body, v); err != nil {
			c.t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
}

func (c *cluster) post(path, body string, header bool) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.http.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if header {
		req.Header.Set("X-Keel-Console", "1")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAPIReadOnly(t *testing.T) {
	c := startCluster(t, false)
	f := c.seed()

	var topics []admin.Topic
	c.getJSON("/api/topics", 200, &topics)
	if len(topics) != 3 || topics[2].Name != f.topic || topics[2].Messages != 4 { // %DLQ%billing, %RETRY%billing, Orders
		t.Errorf("topics %+v", topics)
	}
	var td admin.TopicDetail
	c.getJSON("/api/topics/"+f.topic, 200, &td)
	if len(td.Queues) != 2 || td.Queues[0].MaxOffset != 4 {
		t.Errorf("topic %+v", td)
	}
	c.getJSON("/api/topics/"+url.PathEscape("%DLQ%billing"), 200, &td)
	if td.Messages != 1 {
		t.Errorf("DLQ topic %+v", td)
	}
	var nf map[string]string
	c.getJSON("/api/topics/Nope", 404, &nf)
	if want := `There is no topic named "Nope" on any broker of this cluster.`; nf["error"] != want {
		t.Errorf("missing topic: %q, want %q", nf["error"], want)
	}

	var groups []admin.Group
	c.getJSON("/api/groups", 200, &groups)
	if len(groups) != 1 || groups[0].Name != f.group || groups[0].Lag != 3 || groups[0].DLQMessages != 1 || groups[0].Members != 1 {
		t.Errorf("groups %+v", groups)
	}
	var g groupView
	c.getJSON("/api/groups/"+f.group, 200, &g)
	if g.Lag != 3 || len(g.Clients) != 1 || g.Subscriptions[f.topic] != "created" || len(g.LagTrend) != 2 {
		t.Errorf("group %+v", g)
	}
	c.getJSON("/api/groups/nobody", 404, &nf)
	if strings.Contains(nf["error"], "admin:") || !strings.Contains(nf["error"], `consumer group named "nobody"`) {
		t.Errorf("missing group: %q", nf["error"])
	}

	var ms []admin.Message
	c.getJSON("/api/messages?id="+f.sent[1].MsgID, 200, &ms)
	if len(ms) != 1 || ms[0].Keys != "order-41" || !strings.Contains(ms[0].BodyText, `"order":41`) {
		t.Errorf("message by id %+v", ms)
	}
	c.getJSON("/api/messages?topic="+f.topic+"&key="+f.key, 200, &ms)
	if len(ms) != 1 || ms[0].MsgID != f.sent[2].MsgID {
		t.Errorf("messages by key %+v", ms)
	}
	c.getJSON("/api/messages?topic="+f.topic, 400, nil)
	c.getJSON("/api/messages?topic="+f.topic+"&key=k&begin=yesterday", 400, nil)

	var d admin.DLQ
	c.getJSON("/api/dlq/"+f.group, 200, &d)
	if d.Total != 1 || len(d.Messages) != 1 || d.Messages[0].MsgID != f.deadID || d.Messages[0].OriginTopic != f.topic {
		t.Errorf("dlq %+v", d)
	}
	var o overview
	c.getJSON("/api/overview", 200, &o)
	if len(o.Brokers) != 1 || o.Topics != 1 || o.Messages != 4 || o.Lag != 3 || o.DLQMessages != 1 || o.Local == nil {
		t.Errorf("overview %+v", o)
	}
	var txs []admin.BrokerTransactions
	c.getJSON("/api/transactions", 200, &txs)
	if len(txs) != 1 || txs[0].Broker != "broker-a" {
		t.Errorf("transactions %+v", txs)
	}
	c.getJSON("/api/nothing", 404, nil)

	// Actions are refused without write access.
	if code, body := c.post("/api/topics", `{"topic":"New","queues":2}`, true); code != 403 || !strings.Contains(body, "--console-write") {
		t.Errorf("create on a read-only console: %d %s", code, body)
	}
	if code, _ := c.post("/api/dlq/"+f.group+"/resend", `{"all":true}`, true); code != 403 {
		t.Errorf("resend on a read-only console: %d", code)
	}
	resp, err := c.get("/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("index: %v %v", err, resp)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(page), `<script src="app.js"></script>`) {
		t.Errorf("index page: %s", page)
	}
}

func TestAPIWriteActions(t *testing.T) {
	c := startCluster(t, true)
	f := c.seed()
	if code, body := c.post("/api/topics", `{"topic":"New","queues":2}`, false); code != 403 || !strings.Contains(body, "X-Keel-Console") {
		t.Errorf("create without the console header: %d %s", code, body)
	}
	if code, body := c.post("/api/topics", `{"topic":"New","queues":2}`, true); code != 201 || !strings.Contains(body, `"topic": "New"`) {
		t.Errorf("create: %d %s", code, body)
	}
	if code, _ := c.post("/api/topics", `{"topic":"New","queues":2}`, true); code != 409 {
		t.Errorf("create twice: %d", code)
	}
	for _, bad := range []string{`{"topic":"","queues":2}`, `{"topic":"X","queues":0}`, `{"topic":"X","queues":1,"perm":"x"}`, `{"nope":1}`, `[`} {
		if code, _ := c.post("/api/topics", bad, true); code != 400 {
			t.Errorf("create %s: %d", bad, code)
		}
	}
	if code, _ := c.post("/api/dlq/"+f.group+"/resend", `{}`, true); code != 400 {
		t.Errorf("resend without msgId or all: %d", code)
	}
	if code, body := c.post("/api/dlq/"+f.group+"/resend", `{"msgId":"`+f.deadID+`"}`, true); code != 200 || !strings.Contains(body, `"topic": "Orders"`) {
		t.Errorf("resend one: %d %s", code, body)
	}
	// A dead letter is resent once: "all" skips the one resent above, and
	// resending it again is a conflict.
	var rs []admin.Resent
	code, body := c.post("/api/dlq/"+f.group+"/resend", `{"all":true}`, true)
	if err := json.Unmarshal([]byte(body), &rs); code != 200 || err != nil || len(rs) != 0 {
		t.Errorf("resend all after resending the only dead letter: %d %s", code, body)
	}
	// The conflict says so for a browser user (no command-line flag) and
	// offers the page's "again"; asked again, it resends.
	if code, body := c.post("/api/dlq/"+f.group+"/resend", `{"msgId":"`+f.deadID+`"}`, true); code != 409 || !strings.Contains(body, "resent before") ||
		strings.Contains(body, "--force") || !strings.Contains(body, `"again": true`) {
		t.Errorf("resend one twice: %d %s", code, body)
	}
	if code, body := c.post("/api/dlq/"+f.group+"/resend", `{"msgId":"`+f.deadID+`","again":true}`, true); code != 200 || !strings.Contains(body, `"topic": "Orders"`) {
		t.Errorf("resend one again: %d %s", code, body)
	}
	if code, _ := c.post("/api/dlq/"+f.group+"/resend", `{"msgId":"NOPE"}`, true); code != 404 {
		t.Errorf("resend unknown: %d", code)
	}
	var td admin.TopicDetail
	waitFor(t, "the resent messages", func() bool {
		c.getJSON("/api/topics/"+f.topic, 200, &td)
		return td.Messages == 6 // the topic's four messages and the dead letter resent twice
	})
}
