package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/spf13/cobra"
)

// TestNamesrvAddrEnv: the admin commands take the NameServer from
// $NAMESRV_ADDR when -n is not given, as RocketMQ's tools do; -n wins.
func TestNamesrvAddrEnv(t *testing.T) {
	c := startCluster(t)
	c.ok("topic", "create", "EnvTopic", "--queues", "1")
	t.Setenv(envNamesrvAddr, c.namesrv)
	code, out, stderr := runCLI(t, context.Background(), "topic", "list")
	if code != exitOK || !strings.Contains(out, "EnvTopic") {
		t.Fatalf("topic list with $NAMESRV_ADDR: exit %d\n%s\n%s", code, out, stderr)
	}
	code, _, stderr = runCLI(t, context.Background(), "topic", "list", "-n", "127.0.0.1:1", "--timeout", "2s")
	if code != exitError || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("-n did not override $NAMESRV_ADDR: exit %d %q", code, stderr)
	}
}

// TestBrokerNamesrvAddrEnv: keel broker registers with $NAMESRV_ADDR when
// neither -n nor broker.conf names a NameServer.
func TestBrokerNamesrvAddrEnv(t *testing.T) {
	load := func(args ...string) string {
		t.Helper()
		var o options
		cmd := &cobra.Command{Use: "broker"}
		o.addConfigFlags(cmd)
		cmd.Flags().StringVarP(&o.namesrvAddr, "namesrv-addr", "n", "", "")
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		b, err := o.loadBroker(cmd, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return b.NamesrvAddr
	}
	t.Setenv(envNamesrvAddr, "10.0.0.1:9876")
	if got := load(); got != "10.0.0.1:9876" {
		t.Errorf("namesrvAddr = %q, want $NAMESRV_ADDR", got)
	}
	if got := load("-n", "10.0.0.2:9876"); got != "10.0.0.2:9876" {
		t.Errorf("namesrvAddr = %q, want -n", got)
	}
	if got := load("-c", writeConf(t, "namesrvAddr=10.0.0.3:9876\n")); got != "10.0.0.3:9876" {
		t.Errorf("namesrvAddr = %q, want broker.conf's", got)
	}
}

// TestBusyPortFailsBeforeStarting: a busy address of any listener stops
// serve, broker and namesrv before any service starts (no store opened, no
// NameServer registered with), with one line naming the address and the
// flag that changes it.
func TestBusyPortFailsBeforeStarting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	free := "127.0.0.1:0"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"serve http", []string{"serve", "--namesrv-listen", free, "--amqp-listen", "", "--broker-listen", free, "--kafka-listen", "", "--http-listen", busy},
			"HTTP listener cannot listen on " + busy + ": address already in use (choose another address with --http-listen or httpListen in broker.conf)"},
		{"serve broker", []string{"serve", "--namesrv-listen", free, "--amqp-listen", "", "--broker-listen", busy, "--kafka-listen", "", "--http-listen", free},
			"broker listener cannot listen on " + busy + ": address already in use (choose another address with --broker-listen or listenPort in broker.conf)"},
		{"serve namesrv", []string{"serve", "--namesrv-listen", busy, "--amqp-listen", "", "--broker-listen", free, "--kafka-listen", "", "--http-listen", free},
			"NameServer listener cannot listen on " + busy + ": address already in use (choose another address with --namesrv-listen)"},
		{"broker http", []string{"broker", "-n", "127.0.0.1:1", "--amqp-listen", "", "--broker-listen", free, "--kafka-listen", "", "--http-listen", busy},
			"HTTP listener cannot listen on " + busy},
		{"namesrv", []string{"namesrv", "--namesrv-listen", busy}, "NameServer listener cannot listen on " + busy},
		{"serve amqp", []string{"serve", "--namesrv-listen", free, "--amqp-listen", busy, "--kafka-listen", "", "--broker-listen", free, "--http-listen", free},
			"AMQP listener cannot listen on " + busy + ": address already in use (choose another address with --amqp-listen or amqpListen in broker.conf)"},
		{"broker amqp", []string{"broker", "-n", "127.0.0.1:1", "--amqp-listen", busy, "--kafka-listen", "", "--broker-listen", free, "--http-listen", free},
			"AMQP listener cannot listen on " + busy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := tt.args
			if args[0] != "namesrv" {
				args = append(args, "--data-dir", dir)
			}
			start := time.Now()
			code, _, stderr := runCLI(t, context.Background(), args...)
			took := time.Since(start)
			if code != exitError || !strings.Contains(stderr, "keel: "+tt.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, exitError, tt.want)
			}
			if n := strings.Count(stderr, "\n"); strings.Contains(stderr, "listening") || strings.Contains(stderr, "store open") || n > 2 {
				t.Errorf("services started before the busy port was found (%d lines):\n%s", n, stderr)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the data directory was created: %v", err)
			}
			if took > time.Second {
				t.Errorf("took %v to fail", took)
			}
		})
	}
}

const opsACL = `accounts:
  - accessKey: admin001
    secretKey: admin-secret
    admin: true
  - accessKey: reader01
    secretKey: reader-secret
    defaultTopicPerm: SUB
`

// TestServeHTTPWithACL: with aclEnable=true and no httpToken the console,
// its API and /metrics refuse requests without credentials (they answered
// anyone, message bodies included) and accept an ACL admin account as HTTP
// Basic; the probes stay open.
func TestServeHTTPWithACL(t *testing.T) {
	aclFile := filepath.Join(t.TempDir(), "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(opsACL), 0o600); err != nil {
		t.Fatal(err)
	}
	c := startClusterWith(t, "aclEnable=true\naclFile="+aclFile+"\n")
	base := c.httpBase()
	get := func(path, ak, sk string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		if ak != "" {
			req.SetBasicAuth(ak, sk)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, path := range []string{"/metrics", "/api/topics", "/api/messages?id=7F0000017CD09E81C803948D33D938EF", "/api/overview", "/"} {
		if code := get(path, "", ""); code != http.StatusUnauthorized {
			t.Errorf("%s without credentials: %d, want 401", path, code)
		}
		if code := get(path, "reader01", "reader-secret"); code != http.StatusUnauthorized {
			t.Errorf("%s as a non-admin account: %d, want 401", path, code)
		}
		if code := get(path, "admin001", "wrong-secret"); code != http.StatusUnauthorized {
			t.Errorf("%s with a wrong secret: %d, want 401", path, code)
		}
	}
	if code := get("/metrics", "admin001", "admin-secret"); code != http.StatusOK {
		t.Errorf("/metrics as the admin account: %d", code)
	}
	if code := get("/", "admin001", "admin-secret"); code != http.StatusOK {
		t.Errorf("console as the admin account: %d", code)
	}
	if code := get("/healthz", "", ""); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if !strings.Contains(c.logs.String(), `auth="an ACL admin account (HTTP Basic accessKey:secretKey)"`) {
		t.Errorf("the startup log does not say how HTTP is protected:\n%s", c.logs.String())
	}
}

// TestListenersLogTheirProtection: the startup log says, per listener,
// where it listens, what it serves and what protects it.
func TestListenersLogTheirProtection(t *testing.T) {
	c := startCluster(t)
	c.httpBase()
	logs := c.logs.String()
	for _, re := range []string{
		`msg="NameServer listening" addr=127\.0\.0\.1:\d+ tls=disabled .*auth="none \(a NameServer does no access control\)" reach="this host only \(loopback\)"`,
		`msg="broker listening" .* auth="none \(aclEnable=false\)" reach="this host only \(loopback\)"`,
		`msg="HTTP listening" .*serves="/metrics, console \(read-only\) and /api/, /healthz, /readyz \(open\)" auth=none reach="this host only \(loopback\)"`,
		`msg="keel serve" version=\S+ pid=` + strconv.Itoa(os.Getpid()) + ` `, // the process to signal (not go run's)
	} {
		if !regexp.MustCompile(re).MatchString(logs) {
			t.Errorf("startup log lacks %s:\n%s", re, logs)
		}
	}
}

// fakeListener is a listener bound (as far as its Addr says) at addr.
type fakeListener struct {
	net.Listener
	addr net.Addr
}

func (f fakeListener) Addr() net.Addr { return f.addr }
func (f fakeListener) Close() error   { return nil }

// TestHTTPSafeByDefault: the HTTP listener defaults to loopback, and one
// reachable beyond this host needs httpToken or aclEnable=true.
func TestHTTPSafeByDefault(t *testing.T) {
	b, _, _, _, err := loadWith(t)
	if err != nil {
		t.Fatal(err)
	}
	if b.HTTPListen != "127.0.0.1:8080" {
		t.Errorf("default httpListen %q, want loopback", b.HTTPListen)
	}
	public := &net.TCPAddr{IP: net.IPv4zero, Port: 8080}
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	cases := []struct {
		name  string
		addr  net.Addr
		conf  string
		allow bool
	}{
		{"loopback, nothing set", local, "", true},
		{"every interface, nothing set", public, "", false},
		{"every interface, token", public, "httpToken=t0ken-123\n", true},
		{"every interface, ACL", public, "aclEnable=true\n", true},
	}
	for _, c := range cases {
		cfg, _, _, _, err := loadWith(t, "-c", writeConf(t, "httpListen=:8080\n"+c.conf))
		if err != nil {
			t.Fatal(err)
		}
		err = checkHTTPExposure(cfg, boundListeners{listenHTTP: fakeListener{addr: c.addr}})
		if (err == nil) != c.allow {
			t.Errorf("%s: err = %v, want allowed=%v", c.name, err, c.allow)
		}
		if err != nil && !strings.Contains(err.Error(), "set httpToken (or aclEnable=true) in broker.conf, or listen on loopback") {
			t.Errorf("%s: error does not say what to do: %v", c.name, err)
		}
	}
}

// TestNamesrvFlagWrongAddress: -n pointed at a broker, at Keel's HTTP port
// or at another HTTP server says what answered there, at once.
func TestNamesrvFlagWrongAddress(t *testing.T) {
	c := startCluster(t)
	httpAddr := strings.TrimPrefix(c.httpBase(), "http://")
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() { // an HTTP server that answers anything with 400 at once
		for {
			conn, err := other.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 512)
				if _, err := conn.Read(buf); err == nil {
					conn.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
				}
			}()
		}
	}()
	tests := []struct{ addr, want string }{
		{c.broker, c.broker + " is not a NameServer (it looks like a broker)"},
		{httpAddr, httpAddr + " is not a NameServer (it looks like an HTTP server)"},
		{other.Addr().String(), other.Addr().String() + " is not a NameServer (it looks like an HTTP server)"},
	}
	for _, tt := range tests {
		start := time.Now()
		code, _, stderr := runCLI(t, context.Background(), "topic", "list", "-n", tt.addr, "--timeout", "30s")
		if code != exitError || !strings.Contains(stderr, tt.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("-n %s: exit %d, stderr %q; want one line with %q", tt.addr, code, stderr, tt.want)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("-n %s: took %v (waited for the timeout)", tt.addr, took)
		}
	}
}

// serveOn runs keel serve on dir until the returned stop is called.
func serveOn(t *testing.T, dir string) (*cluster, func()) {
	t.Helper()
	path := writeConf(t, "brokerName=broker-a\nflushDiskType=ASYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n")
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-c", path, "--data-dir", dir, "--namesrv-listen", "127.0.0.1:0",
			"--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", ""}, &bytes.Buffer{}, logs)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("serve exited %d:\n%s", code, logs.String())
			}
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not stop:\n%s", logs.String())
		}
	}
	t.Cleanup(stop)
	c := &cluster{t: t, namesrv: namesrvAddrFromLogs(t, logs), logs: logs}
	waitFor(t, "the broker to register", 30*time.Second, func() bool { return brokerRegistered(t, c.namesrv, "broker-a") })
	ac := admin.New(admin.Config{NamesrvAddrs: []string{c.namesrv}})
	defer ac.Close()
	bs, err := ac.Brokers(context.Background())
	if err != nil || len(bs) != 1 {
		t.Fatalf("brokers %v: %v", bs, err)
	}
	c.broker = bs[0].Addr
	return c, stop
}

// deadLetters sends n messages to topic and returns each to the broker as
// a dead letter of group (no retries left).
func deadLetters(c *cluster, topic, group string, n int) []admin.SendResult {
	c.t.Helper()
	c.ok("topic", "create", topic, "--queues", "1")
	sent := make([]admin.SendResult, n)
	cl := c.dialBroker()
	hb := `{"clientID":"worker-1","producerDataSet":[],"consumerDataSet":[{"groupName":"` + group + `","consumeType":"CONSUME_PASSIVELY",` +
		`"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"topic":"` + topic + `",` +
		`"subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}`
	c.rpc(cl, remoting.ReqHeartBeat, nil, []byte(hb))
	for i := range sent {
		c.okJSON(&sent[i], "msg", "send", "--topic", topic, "--keys", "k"+strconv.Itoa(i), "--body", "body "+strconv.Itoa(i))
		var m []admin.Message
		c.okJSON(&m, "msg", "get", sent[i].OffsetMsgID)
		c.rpc(cl, remoting.ReqConsumerSendMsgBack, map[string]string{"group": group, "offset": strconv.FormatInt(m[0].CommitLogOffset, 10),
			"delayLevel": "0", "originMsgId": sent[i].MsgID, "originTopic": topic, "maxReconsumeTimes": "0"}, nil)
	}
	waitFor(c.t, "the dead letters", 10*time.Second, func() bool {
		var d admin.DLQ
		_, out, _ := c.keel("dlq", "list", "--group", group, "-o", "json")
		return json.Unmarshal([]byte(out), &d) == nil && d.Total == int64(n)
	})
	return sent
}

// dlqResent returns the RESENT column of dlq list -o json by message id.
func dlqResent(c *cluster, group string) (map[string]bool, int64) {
	c.t.Helper()
	var d admin.DLQ
	c.okJSON(&d, "dlq", "list", "--group", group)
	out := map[string]bool{}
	for _, m := range d.Messages {
		out[m.MsgID] = m.Resent
	}
	return out, d.Pending
}

// TestDLQResendOnce: a dead letter resent with --msg-id shows RESENT true,
// also after a restart, and neither --all nor a second --msg-id resends it
// again unless --force.
func TestDLQResendOnce(t *testing.T) {
	dir := t.TempDir()
	c, stop := serveOn(t, dir)
	sent := deadLetters(c, "Jobs", "workers", 2)

	out := c.ok("dlq", "resend", "--group", "workers", "--msg-id", sent[0].MsgID)
	wantMatch(t, "resend --msg-id", out, `Resent 1 message\(s\)`)
	if resent, pending := dlqResent(c, "workers"); !resent[sent[0].MsgID] || resent[sent[1].MsgID] || pending != 1 {
		t.Errorf("after resend --msg-id: resent %v, pending %d", resent, pending)
	}
	stop()

	c, _ = serveOn(t, dir)
	if resent, pending := dlqResent(c, "workers"); !resent[sent[0].MsgID] || pending != 1 {
		t.Errorf("after a restart: resent %v, pending %d", resent, pending)
	}
	var rs []admin.Resent
	c.okJSON(&rs, "dlq", "resend", "--group", "workers", "--all")
	if len(rs) != 1 || rs[0].MsgID != sent[1].MsgID {
		t.Fatalf("resend --all after --msg-id resent %+v, want only %s", rs, sent[1].MsgID)
	}
	wantMatch(t, "resend --all again", c.ok("dlq", "resend", "--group", "workers", "--all"), `Resent 0 message\(s\)`)
	if resent, pending := dlqResent(c, "workers"); !resent[sent[0].MsgID] || !resent[sent[1].MsgID] || pending != 0 {
		t.Errorf("after resend --all: resent %v, pending %d", resent, pending)
	}
	code, _, errOut := c.keel("dlq", "resend", "--group", "workers", "--msg-id", sent[0].MsgID)
	if code != exitError || !strings.Contains(errOut, "resent before") {
		t.Errorf("second resend --msg-id: exit %d %q", code, errOut)
	}
	c.okJSON(&rs, "dlq", "resend", "--group", "workers", "--all", "--force")
	if len(rs) != 2 {
		t.Errorf("resend --all --force resent %d, want both", len(rs))
	}
	// Every copy on Jobs: the two originals, one resend each, two forced.
	waitFor(t, "the resent copies", 10*time.Second, func() bool {
		var d admin.TopicDetail
		c.okJSON(&d, "topic", "describe", "Jobs")
		return d.Messages == 6
	})
}

// TestDLQErrors: an unknown group is not found (as for group describe),
// and an unknown message id is one clear error with nothing on stdout.
func TestDLQErrors(t *testing.T) {
	c := startCluster(t)
	for _, args := range [][]string{
		{"dlq", "list", "--group", "nosuch"},
		{"dlq", "resend", "--group", "nosuch", "--all"},
		{"group", "describe", "nosuch"},
	} {
		code, out, errOut := c.keel(args...)
		if code != exitError || out != "" || !strings.Contains(errOut, `not found: consumer group "nosuch"`) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	deadLetters(c, "Jobs", "workers", 1)
	code, out, errOut := c.keel("dlq", "resend", "--group", "workers", "--msg-id", "BOGUS")
	if code != exitError || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "not found: message BOGUS") {
		t.Errorf("resend --msg-id BOGUS: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// A group that exists but has no dead letters: an empty list.
	c.ok("topic", "create", "Calm", "--queues", "1")
	cl := c.dialBroker()
	c.rpc(cl, remoting.ReqHeartBeat, nil, []byte(`{"clientID":"w2","producerDataSet":[],"consumerDataSet":[{"groupName":"calm",`+
		`"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",`+
		`"subscriptionDataSet":[{"topic":"Calm","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}`))
	wantMatch(t, "dlq list of a calm group", c.ok("dlq", "list", "--group", "calm"), `Dead letters of calm:\s+0 stored`)
}

// TestMsgSendNoAutoCreate: with autoCreateTopicEnable=false a send to a
// missing topic fails and says why.
func TestMsgSendNoAutoCreate(t *testing.T) {
	c := startClusterWith(t, "autoCreateTopicEnable=false\n")
	code, _, errOut := c.keel("msg", "send", "--topic", "Nope", "--body", "x")
	if code != exitError || !strings.Contains(errOut, `topic "Nope" (no broker creates topics on first send: autoCreateTopicEnable=false; create it with keel topic create)`) {
		t.Errorf("send to a missing topic: exit %d, %q", code, errOut)
	}
}

// TestMsgTailFromBeginningInTimeOrder: the stored messages come in the
// order they were stored across queues, not queue by queue.
func TestMsgTailFromBeginningInTimeOrder(t *testing.T) {
	c := startCluster(t)
	c.ok("topic", "create", "Spread", "--queues", "4")
	queues := []int{3, 0, 2, 1, 3, 1, 0, 2, 2, 0}
	var want []string
	for i, q := range queues {
		var r admin.SendResult
		c.okJSON(&r, "msg", "send", "--topic", "Spread", "--queue", strconv.Itoa(q), "--body", "m"+strconv.Itoa(i))
		want = append(want, r.MsgID)
	}
	c.eventually(`(?m)^Spread\s+normal\s+4\s+4\s+RW\s+1\s+10$`, "topic", "list")
	out := c.ok("msg", "tail", "--topic", "Spread", "--from-beginning", "--count", strconv.Itoa(len(queues)), "-o", "json")
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m admin.Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		got = append(got, m.MsgID)
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("tail --from-beginning order\n got %v\nwant %v", got, want)
	}
}

// TestBenchDiskCreatesDir: bench disk --dir on a directory that does not
// exist yet measures there (creating and removing it); one whose parent is
// missing is a clear error.
func TestBenchDiskCreatesDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	code, out, stderr := runCLI(t, context.Background(), "bench", "disk", "--dir", dir, "--seq-bytes", "1MiB",
		"--sync-mib-writes", "1", "--sync-4k-writes", "2")
	if code != exitOK || !strings.Contains(out, "sequential write") {
		t.Fatalf("bench disk --dir %s: exit %d\n%s\n%s", dir, code, out, stderr)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the directory bench disk created is left behind: %v", err)
	}
	deep := filepath.Join(t.TempDir(), "a", "b")
	code, _, stderr = runCLI(t, context.Background(), "bench", "disk", "--dir", deep, "--seq-bytes", "1MiB")
	if code != exitError || !strings.Contains(stderr, "does not exist and cannot be created") {
		t.Errorf("bench disk --dir %s: exit %d %q", deep, code, stderr)
	}
}

// TestTransactionExample runs examples/transaction against keel serve (with
// quick check-backs, the NameServer given in $NAMESRV_ADDR): it says in words what each local transaction did and
// prints no client error for the rollback and the unknown answer it means.
func TestTransactionExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs an example program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the example")
	}
	bin := filepath.Join(t.TempDir(), "transaction")
	build := exec.Command(goBin, "build", "-o", bin, "./examples/transaction")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	c := startServe(t, "brokerName=broker-a\nflushDiskType=ASYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n"+
		"transactionTimeOut=300\ntransactionCheckInterval=200\n")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	run := exec.CommandContext(ctx, bin) // the NameServer from $NAMESRV_ADDR, as for RocketMQ's tools
	run.Env = append(os.Environ(), envNamesrvAddr+"="+c.namesrv)
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("transaction example: %v\n%s", err, out)
	}
	for _, want := range []string{
		"local transaction committed: the message is delivered now",
		"local transaction rolled back: the message is discarded, never delivered",
		"local transaction still running: the broker will ask the producer later",
		"done:",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, bad := range []string{"says 2", "says 3", "state unexpected", "WARN", "warn"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("output has %q:\n%s", bad, out)
		}
	}
}

// TestShutdownLogsFinalLine: a clean shutdown ends the log with one line
// saying the store was flushed and checkpointed, and it was (no abort
// marker left).
func TestShutdownLogsFinalLine(t *testing.T) {
	dir := t.TempDir()
	c, stop := serveOn(t, dir)
	c.ok("topic", "create", "Last", "--queues", "1")
	c.ok("msg", "send", "--topic", "Last", "--body", "x")
	stop()
	lines := strings.Split(strings.TrimSpace(c.logs.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `msg="`+stoppedLine+`"`) {
		t.Errorf("last log line %q, want %q", last, stoppedLine)
	}
	if _, err := os.Stat(filepath.Join(dir, "abort")); !os.IsNotExist(err) {
		t.Errorf("abort marker after a clean shutdown: %v", err)
	}
}

// TestReadmeNewcomerPath: README's quick start has exactly two commands,
// one that runs Keel on its defaults and the test command CI runs, and it
// says where the console is; the CLI part says how to get the binary.
func TestReadmeNewcomerPath(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile(filepath.Join("..", "..", ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	quick, cli, ok := strings.Cut(text, "## Using the CLI")
	if !ok {
		t.Fatal(`README has no "## Using the CLI" section`)
	}
	var cmds []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(quick, -1) {
		for _, l := range strings.Split(strings.TrimSpace(block[1]), "\n") {
			cmds = append(cmds, strings.TrimSpace(l))
		}
	}
	if len(cmds) != 2 || cmds[0] != "go run ./cmd/keel serve" || cmds[1] != "go test ./..." {
		t.Errorf("README's newcomer commands %q, want [go run ./cmd/keel serve, go test ./...]", cmds)
	}
	if !regexp.MustCompile(`(?m)^go test \./\.\.\.$`).Match(ci) {
		t.Errorf(".ci/run does not run README's test command")
	}
	if !strings.Contains(quick, "http://127.0.0.1:8080/") {
		t.Errorf("README's quick start does not give the console's URL")
	}
	for _, want := range []string{"go build -o keel ./cmd/keel", "go install ./cmd/keel", "$NAMESRV_ADDR"} {
		if !strings.Contains(cli, want) {
			t.Errorf("README's CLI part lacks %q", want)
		}
	}
}

// TestNamesrvFlagDoorAddress: -n pointed at the Kafka or the AMQP listener
// says which door answered there, at once, instead of "EOF" or "frame too
// large: length 1095586128" (the bytes "AMQP").
func TestNamesrvFlagDoorAddress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", tempDir, "--namesrv-listen", "127.0.0.1:0",
			"--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--amqp-listen", "127.0.0.1:0", "--http-listen", ""},
			&bytes.Buffer{}, logs)
	}()
	defer func() {
		cancel()
		<-done
	}()
	var kafkaAddr, amqpAddr string
	waitFor(t, "the Kafka and AMQP listeners", 30*time.Second, func() bool {
		if m := kafkaListenRE.FindStringSubmatch(logs.String()); m != nil {
			kafkaAddr = m[1]
		}
		if m := amqpListenRE.FindStringSubmatch(logs.String()); m != nil {
			amqpAddr = m[1]
		}
		return kafkaAddr != "" && amqpAddr != ""
	})
	for _, tt := range []struct{ addr, want string }{
		{kafkaAddr, kafkaAddr + " is not a NameServer (it looks like a Kafka listener)"},
		{amqpAddr, amqpAddr + " is not a NameServer (it looks like an AMQP listener)"},
	} {
		start := time.Now()
		code, _, stderr := runCLI(t, context.Background(), "topic", "list", "-n", tt.addr, "--timeout", "30s")
		if code != exitError || !strings.Contains(stderr, tt.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("-n %s: exit %d, stderr %q; want one line with %q", tt.addr, code, stderr, tt.want)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("-n %s: took %v", tt.addr, took)
		}
	}
}
