package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/remoting"
)

// keel runs a keel command against the cluster and returns its exit code,
// stdout and stderr.
func (c *cluster) keel(args ...string) (int, string, string) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, append(args, "-n", c.namesrv), &out, &errOut)
	return code, out.String(), errOut.String()
}

// ok runs a command that must succeed and returns its stdout.
func (c *cluster) ok(args ...string) string {
	c.t.Helper()
	code, out, errOut := c.keel(args...)
	if code != exitOK {
		c.t.Fatalf("keel %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// okJSON runs a command with -o json and decodes its output into v.
func (c *cluster) okJSON(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("keel %s -o json: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// eventually retries a command until its stdout matches re (the store
// dispatches and indexes a message shortly after acknowledging it).
func (c *cluster) eventually(re string, args ...string) string {
	c.t.Helper()
	rx := regexp.MustCompile(re)
	var out string
	waitFor(c.t, "keel "+strings.Join(args, " ")+" to match "+re, 10*time.Second, func() bool {
		_, out, _ = c.keel(args...)
		return rx.MatchString(out)
	})
	return out
}

// rpc sends one request to the broker and fails the test unless it succeeds.
func (c *cluster) rpc(cl *remoting.Client, code int16, ext map[string]string, body []byte) *remoting.Command {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(code, ext, body))
	if err != nil || resp.Code != remoting.ResSuccess {
		c.t.Fatalf("request %s: %v %+v", remoting.RequestCode(code), err, resp)
	}
	return resp
}

func (c *cluster) dialBroker() *remoting.Client {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, c.broker, remoting.ClientConfig{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

func wantMatch(t *testing.T, what, out string, res ...string) {
	t.Helper()
	for _, re := range res {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("%s: output does not match %q:\n%s", what, re, out)
		}
	}
}

func TestAdminTopicCommands(t *testing.T) {
	c := startCluster(t)
	out := c.ok("topic", "create", "Orders", "--queues", "2")
	wantMatch(t, "create", out, `Topic Orders created`, `(?m)^broker-a\s+2\s+2\s+RW\s+false$`)

	code, _, errOut := c.keel("topic", "create", "Orders")
	if code != exitError || !strings.Contains(errOut, "already exists") {
		t.Errorf("second create: exit %d, %q", code, errOut)
	}
	wantMatch(t, "list", c.ok("topic", "list"), `(?m)^TOPIC\s+KIND\s+READ\s+WRITE\s+PERM\s+BROKERS\s+MESSAGES$`,
		`(?m)^Orders\s+normal\s+2\s+2\s+RW\s+1\s+0$`)
	var topics []admin.Topic
	c.okJSON(&topics, "topic", "list")
	if len(topics) != 1 || topics[0].Name != "Orders" || topics[0].Messages != 0 {
		t.Errorf("topic list -o json: %+v", topics)
	}
	wantMatch(t, "list --all", c.ok("topic", "list", "--all"), `(?m)^TBW102\s+system\s+`)

	out = c.ok("topic", "update", "Orders", "--write-queues", "3", "--perm", "r")
	wantMatch(t, "update", out, `(?m)^broker-a\s+2\s+3\s+R-\s+false$`)
	c.ok("topic", "update", "Orders", "--perm", "rw")

	c.ok("msg", "send", "--topic", "Orders", "--queue", "1", "--body", "x")
	out = c.eventually(`(?m)^broker-a\s+1\s+0\s+1\s+1$`, "topic", "describe", "Orders")
	wantMatch(t, "describe", out, `Topic:\s+Orders \(normal\)`, `Messages:\s+1`, `(?m)^broker-a\s+0\s+0\s+0\s+0$`)
	var d admin.TopicDetail
	c.okJSON(&d, "topic", "describe", "Orders")
	if d.Messages != 1 || len(d.Queues) != 3 || d.Queues[1].MaxOffset != 1 {
		t.Errorf("describe -o json: %+v", d)
	}

	c.ok("topic", "delete", "Orders")
	code, _, errOut = c.keel("topic", "describe", "Orders")
	if code != exitError || !strings.Contains(errOut, `topic "Orders"`) || !strings.Contains(errOut, "not found") {
		t.Errorf("describe a deleted topic: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{
		{"topic", "describe"}, {"topic", "create", "X", "--queues", "0"}, {"topic", "update", "X"},
		{"topic", "list", "-o", "yaml"}, {"topic", "create", "X", "--perm", "rwx"},
	} {
		if code, _, errOut := c.keel(args...); code != exitUsage {
			t.Errorf("keel %v: exit %d (%s), want %d", args, code, errOut, exitUsage)
		}
	}
}

func TestAdminUnreachableNameServer(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"topic", "list", "-n", "127.0.0.1:1", "--timeout", "2s"}, &out, &errOut)
	if code != exitError || !strings.Contains(errOut.String(), "no NameServer reachable") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

func TestAdminMessageCommands(t *testing.T) {
	c := startCluster(t)
	c.ok("topic", "create", "Pay", "--queues", "2")
	var sent admin.SendResult
	c.okJSON(&sent, "msg", "send", "--topic", "Pay", "--tag", "TagA", "--keys", "order-1,order-2", "--body", "hello keel",
		"--property", "trace=abc")
	if sent.Status != "SEND_OK" || sent.MsgID == "" || sent.OffsetMsgID == "" || sent.Topic != "Pay" {
		t.Fatalf("send -o json: %+v", sent)
	}
	out := c.eventually(`hello keel`, "msg", "get", sent.MsgID)
	wantMatch(t, "get", out, `Message ID:\s+`+sent.MsgID, `Tags:\s+TagA`, `Keys:\s+order-1 order-2`,
		`Property trace:\s+abc`, `Body:\s+10 bytes`)
	wantMatch(t, "get by offset id", c.ok("msg", "get", sent.OffsetMsgID, "--body", "hex"),
		`Message ID:\s+`+sent.MsgID, `68 65 6c 6c 6f 20 6b 65  65 6c`)
	var got []admin.Message
	c.okJSON(&got, "msg", "get", sent.MsgID, "--topic", "Pay")
	if len(got) != 1 || got[0].BodyText != "hello keel" || got[0].Properties["KEYS"] != "order-1 order-2" {
		t.Errorf("get -o json: %+v", got)
	}

	out = c.eventually(`order-1`, "msg", "query", "--topic", "Pay", "--key", "order-2", "--begin", "1h")
	wantMatch(t, "query", out, `(?m)^`+sent.MsgID+`\s+\d\s+0\s+.*TagA\s+order-1 order-2\s+10$`)
	var q []admin.Message
	c.okJSON(&q, "msg", "query", "--topic", "Pay", "--key", "order-3")
	if len(q) != 0 {
		t.Errorf("query for an unknown key: %+v", q)
	}

	out = c.ok("msg", "tail", "--topic", "Pay", "--from-beginning", "--count", "1")
	wantMatch(t, "tail", out, `(?m)^STORED\s+QUEUE:OFF\s+MSG_ID`, sent.MsgID+`\s+TagA\s+hello keel`)
	// A tail of new messages sees a message sent after it started.
	tailOut := make(chan string, 1)
	go func() {
		_, out, _ := c.keel("msg", "tail", "--topic", "Pay", "--count", "1", "-o", "json")
		tailOut <- out
	}()
	var later admin.SendResult
	deadline := time.After(20 * time.Second)
	for later.MsgID == "" {
		select {
		case out := <-tailOut:
			t.Fatalf("tail ended early: %s", out)
		case <-deadline:
			t.Fatal("tail saw nothing")
		case <-time.After(200 * time.Millisecond): // the tail may not have started pulling yet
			c.okJSON(&later, "msg", "send", "--topic", "Pay", "--body", "later")
		}
	}
	select {
	case out := <-tailOut:
		var m admin.Message
		if err := json.Unmarshal([]byte(out), &m); err != nil || m.BodyText != "later" {
			t.Errorf("tail -o json: %v %s", err, out)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("tail did not print the new message")
	}

	for _, args := range [][]string{{"msg", "send", "--body", "x"}, {"msg", "send", "--topic", "Pay"},
		{"msg", "query", "--topic", "Pay"}, {"msg", "get", "X", "--body", "rot13"}, {"msg", "tail"}} {
		if code, _, errOut := c.keel(args...); code != exitUsage {
			t.Errorf("keel %v: exit %d (%s), want %d", args, code, errOut, exitUsage)
		}
	}
	// A new topic is created by the send (autoCreateTopicEnable, the default).
	wantMatch(t, "send to a new topic", c.ok("msg", "send", "--topic", "Fresh", "--body", "x"), `SEND_OK`)
	c.eventually(`(?m)^Fresh\s+normal\s+4\s+4\s+RW\s+1\s+1$`, "topic", "list")
	code, _, errOut := c.keel("msg", "get", "0123456789ABCDEF0123456789ABCDEF")
	if code != exitError || !strings.Contains(errOut, "not found") {
		t.Errorf("get an unknown id: exit %d, %q", code, errOut)
	}
}

// TestAdminGroupAndDLQCommands drives a consumer group by hand over the
// protocol: a member, a committed offset (lag), and a message returned with
// no retries left (dead letter), then resends it.
func TestAdminGroupAndDLQCommands(t *testing.T) {
	c := startCluster(t)
	c.ok("topic", "create", "Jobs", "--queues", "1")
	var sent [3]admin.SendResult
	for i := range sent {
		c.okJSON(&sent[i], "msg", "send", "--topic", "Jobs", "--keys", "job-"+strconv.Itoa(i), "--body", "job "+strconv.Itoa(i))
	}
	cl := c.dialBroker()
	hb := `{"clientID":"worker-1","producerDataSet":[],"consumerDataSet":[{"groupName":"workers","consumeType":"CONSUME_PASSIVELY",` +
		`"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"topic":"Jobs",` +
		`"subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}`
	c.rpc(cl, remoting.ReqHeartBeat, nil, []byte(hb))
	c.rpc(cl, remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "workers", "topic": "Jobs", "queueId": "0", "commitOffset": "1"}, nil)

	out := c.eventually(`(?m)^Jobs\s+broker-a\s+0\s+3\s+1\s+2\s+`, "group", "describe", "workers")
	wantMatch(t, "describe", out, `Group:\s+workers`, `Model:\s+CLUSTERING, CONSUME_PASSIVELY`, `Subscription:\s+Jobs \*`,
		`Total:\s+broker offset 3, consumer offset 1, lag 2 \(of which retry lag 0\), dead letters 0`, `Members:\s+1`, `(?m)^worker-1\s+127\.0\.0\.1:\d+`)
	var d admin.GroupDetail
	c.okJSON(&d, "group", "describe", "workers")
	if d.Lag != 2 || d.Members != 1 || len(d.Queues) != 1 || d.Queues[0].ConsumerOffset != 1 || d.Queues[0].LastTimestamp == 0 ||
		d.Queues[0].ConsumedAt == 0 || d.Queues[0].OldestUnconsumed == 0 {
		t.Errorf("describe -o json: %+v", d)
	}
	wantMatch(t, "describe columns", out, `(?m)^TOPIC\s+BROKER\s+QUEUE\s+BROKER_OFFSET\s+CONSUMER_OFFSET\s+LAG\s+LAST_CONSUMED\s+BEHIND$`,
		`(?m)^Jobs\s+broker-a\s+0\s+3\s+1\s+2\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\s+\d+(ms|s|m\d+s)$`)
	wantMatch(t, "list", c.ok("group", "list"), `(?m)^workers\s+1\s+CLUSTERING\s+3\s+1\s+2\s+0\s+0$`)
	code, _, errOut := c.keel("group", "describe", "nobody")
	if code != exitError || !strings.Contains(errOut, "not found") {
		t.Errorf("describe an unknown group: exit %d, %q", code, errOut)
	}

	// Message 1 fails with no retries left: it becomes a dead letter.
	var m []admin.Message
	c.okJSON(&m, "msg", "get", sent[1].OffsetMsgID)
	c.rpc(cl, remoting.ReqConsumerSendMsgBack, map[string]string{"group": "workers", "offset": strconv.FormatInt(m[0].CommitLogOffset, 10),
		"delayLevel": "0", "originMsgId": sent[1].MsgID, "originTopic": "Jobs", "maxReconsumeTimes": "0"}, nil)
	out = c.eventually(`(?m)^0\s+`+sent[1].MsgID+`\s+Jobs\s+1\s+.*job-1\s+false$`, "dlq", "list", "--group", "workers")
	wantMatch(t, "dlq list", out, `Dead letters of workers:\s+1 stored, 1 not resent`)
	c.eventually(`(?m)^workers\s+1\s+CLUSTERING\s+3\s+1\s+2\s+0\s+1$`, "group", "list")

	var rs []admin.Resent
	c.okJSON(&rs, "dlq", "resend", "--group", "workers", "--all")
	if len(rs) != 1 || rs[0].MsgID != sent[1].MsgID || rs[0].OriginTopic != "Jobs" || rs[0].Result.Status != "SEND_OK" {
		t.Fatalf("resend --all: %+v", rs)
	}
	wantMatch(t, "resend again", c.ok("dlq", "resend", "--group", "workers", "--all"), `Resent 0 message\(s\)`)
	var dl admin.DLQ
	c.okJSON(&dl, "dlq", "list", "--group", "workers")
	if dl.Total != 1 || dl.Pending != 0 || len(dl.Messages) != 1 || !dl.Messages[0].Resent {
		t.Errorf("dlq list after resend: %+v", dl)
	}
	// Resent once: --msg-id refuses it without --force.
	code, out, errOut = c.keel("dlq", "resend", "--group", "workers", "--msg-id", sent[1].MsgID)
	if code != exitError || out != "" || !strings.Contains(errOut, "was resent before; --force resends it again") {
		t.Errorf("resend --msg-id of a resent dead letter: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out = c.ok("dlq", "resend", "--group", "workers", "--msg-id", sent[1].MsgID, "--force")
	wantMatch(t, "resend --msg-id --force", out, `Resent 1 message\(s\)`, `(?m)^0\s+`+sent[1].MsgID+`\s+Jobs\s+SEND_OK\s+0\s+4$`)

	// The resent copies are new messages on Jobs (new unique keys, so the
	// broker's de-duplication keeps them) with the keys kept, the original
	// id in ORIGIN_MESSAGE_ID and a resend count.
	var copies []admin.Message
	waitFor(t, "the resent copies to be indexed", 10*time.Second, func() bool {
		copies = nil
		_, out, _ := c.keel("msg", "query", "--topic", "Jobs", "--key", "job-1", "-o", "json")
		return json.Unmarshal([]byte(out), &copies) == nil && len(copies) == 3
	})
	for _, cp := range copies[1:] {
		if p := cp.Properties; p[admin.PropResendTimes] != "1" || cp.ReconsumeTimes != 0 || p["RETRY_TOPIC"] != "" ||
			cp.BodyText != "job 1" || cp.MsgID == sent[1].MsgID || p["ORIGIN_MESSAGE_ID"] != sent[1].MsgID {
			t.Errorf("resent copy: %+v", cp)
		}
	}
	if copies[1].MsgID != rs[0].Result.MsgID {
		t.Errorf("resent copy %s, resend reported %s", copies[1].MsgID, rs[0].Result.MsgID)
	}
	if code, _, _ := c.keel("dlq", "resend", "--group", "workers"); code != exitUsage {
		t.Errorf("resend without --msg-id or --all: exit %d", code)
	}
	code, _, errOut = c.keel("dlq", "resend", "--group", "workers", "--msg-id", "NOPE")
	if code != exitError || !strings.Contains(errOut, "not found") {
		t.Errorf("resend an unknown id: exit %d, %q", code, errOut)
	}
}
