package acl

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// syncBuf is a log sink safe for concurrent writers.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func newLogger() (*slog.Logger, *syncBuf) {
	var b syncBuf
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})), &b
}

const testACL = `globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    topicPerms: [orders=PUB, audit=PUB|SUB, secret=DENY]
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: SUB
    defaultGroupPerm: DENY
    topicPerms: [secret=DENY]
    groupPerms: [billing=SUB, blocked=DENY]
  - accessKey: trusted1
    secretKey: trusted-secret
    whiteRemoteAddress: 192.168.7.{1,2}
  - accessKey: admin001
    secretKey: admin-secret
    admin: true
  - accessKey: admin002
    secretKey: admin-secret
    admin: true
    topicPerms: [orders=SUB]
`

func testAuthorizer(t *testing.T) (*Authorizer, *syncBuf) {
	t.Helper()
	r, err := Parse("test.yml", []byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	log, buf := newLogger()
	return NewWithRules(r, log), buf
}

// signed builds a request signed as the Go client signs it.
func signed(code int16, ak, sk string, ext map[string]string, body []byte) *remoting.Command {
	e := map[string]string{KeyAccessKey: ak}
	for k, v := range ext {
		e[k] = v
	}
	e[KeySignature] = Sign(sk, e, body)
	return remoting.NewRequest(code, e, body)
}

func addr(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }

func TestSignKnownVector(t *testing.T) {
	// Computed independently: Base64(HmacSHA1("12345678", "RocketMQ" + "pg" + "T" + "hello")).
	ext := map[string]string{KeyAccessKey: "RocketMQ", "producerGroup": "pg", "topic": "T"}
	if got := Sign("12345678", ext, []byte("hello")); got != "BJBYxmN3+FKvGp4dXrBM3CQJ0F4=" {
		t.Fatalf("Sign = %s", got)
	}
	ext[KeySignature] = "BJBYxmN3+FKvGp4dXrBM3CQJ0F4="
	ext[KeySecurityToken] = "tok"
	if !verifySignature("12345678", ext, []byte("hello")) {
		t.Fatal("Go form (SecurityToken not signed) rejected")
	}
	// Java clients sign the SecurityToken too.
	ext[KeySignature] = "C1ajRCdfwHvK8pZ2g5p9soZNB7E="
	if !verifySignature("12345678", ext, []byte("hello")) {
		t.Fatal("Java form (SecurityToken signed) rejected")
	}
	ext[KeySecurityToken] = "other"
	if verifySignature("12345678", ext, []byte("hello")) {
		t.Fatal("a changed SecurityToken still verifies in the Java form")
	}
	// _UNIQUE_KEY_QUERY is left out by Java brokers.
	ext = map[string]string{KeyAccessKey: "RocketMQ", "producerGroup": "pg", "topic": "T"}
	ext[KeySignature] = Sign("12345678", ext, []byte("hello"))
	ext[keyUniqueQuery] = "true"
	if !verifySignature("12345678", ext, []byte("hello")) {
		t.Fatal("_UNIQUE_KEY_QUERY added after signing rejected")
	}
}

func TestSignRequest(t *testing.T) {
	a, _ := testAuthorizer(t)
	req := remoting.NewRequest(remoting.ReqSendMessage, nil, []byte("b"))
	SignRequest(req, "producer1", "producer-secret")
	req.ExtFields["topic"] = "orders"
	SignRequest(req, "producer1", "producer-secret") // re-signing replaces the old signature
	if err := a.Check(addr("127.0.0.1"), req); err != nil {
		t.Fatal(err)
	}
}

func TestCheck(t *testing.T) {
	a, _ := testAuthorizer(t)
	send := func(ak, sk, topic string) *remoting.Command {
		return signed(remoting.ReqSendMessage, ak, sk, map[string]string{"topic": topic, "producerGroup": "pg"}, []byte("body"))
	}
	sendV2 := func(ak, sk, topic string) *remoting.Command {
		return signed(remoting.ReqSendMessageV2, ak, sk, map[string]string{"b": topic, "a": "pg"}, []byte("body"))
	}
	pull := func(ak, sk, topic, group string) *remoting.Command {
		return signed(remoting.ReqPullMessage, ak, sk, map[string]string{"topic": topic, "consumerGroup": group}, nil)
	}
	hb := func(ak, sk, group, topic string) *remoting.Command {
		body := fmt.Sprintf(`{"clientID":"c","producerDataSet":[{"groupName":"p"}],"consumerDataSet":[{"groupName":%q,"subscriptionDataSet":[{"topic":%q}]}]}`, group, topic)
		return signed(remoting.ReqHeartBeat, ak, sk, nil, []byte(body))
	}
	cases := []struct {
		name   string
		remote string
		req    *remoting.Command
		deny   string // "" = allowed
	}{
		{"send allowed", "127.0.0.1", send("producer1", "producer-secret", "orders"), ""},
		{"send V2 allowed", "127.0.0.1", sendV2("producer1", "producer-secret", "audit"), ""},
		{"send denied topic", "127.0.0.1", send("producer1", "producer-secret", "secret"), "no PUB permission on topic secret (rule permission DENY)"},
		{"send default deny", "127.0.0.1", send("producer1", "producer-secret", "other"), "no PUB permission on topic other (default permission DENY)"},
		{"send V2 default deny", "127.0.0.1", sendV2("producer1", "producer-secret", "other"), "topic other"},
		{"batch both keys", "127.0.0.1", signed(remoting.ReqSendBatchMessage, "producer1", "producer-secret",
			map[string]string{"b": "orders", "topic": "secret"}, nil), "topic secret"},
		{"consumer cannot send", "127.0.0.1", send("consumer1", "consumer-secret", "orders"), "no PUB permission on topic orders"},
		{"wrong secret", "127.0.0.1", send("producer1", "nope-secret", "orders"), "signature mismatch"},
		{"unknown key", "127.0.0.1", send("nobody01", "producer-secret", "orders"), "unknown accessKey"},
		{"no key", "127.0.0.1", remoting.NewRequest(remoting.ReqSendMessage, map[string]string{"topic": "orders"}, nil), "no AccessKey"},
		{"no ext", "127.0.0.1", remoting.NewRequest(remoting.ReqHeartBeat, nil, nil), "no AccessKey"},
		{"global white", "10.10.103.9", remoting.NewRequest(remoting.ReqSendMessage, map[string]string{"topic": "secret"}, nil), ""},
		{"account white skips signature", "192.168.7.2", send("trusted1", "wrong-secret", "anything"), ""},
		{"account white other address", "192.168.7.3", send("trusted1", "wrong-secret", "anything"), "signature mismatch"},
		{"pull allowed", "127.0.0.1", pull("consumer1", "consumer-secret", "orders", "billing"), ""},
		{"pull denied group", "127.0.0.1", pull("consumer1", "consumer-secret", "orders", "blocked"), "no SUB permission on group blocked"},
		{"pull default group deny", "127.0.0.1", pull("consumer1", "consumer-secret", "orders", "other"), "group other (default permission DENY)"},
		{"pull denied topic", "127.0.0.1", pull("consumer1", "consumer-secret", "secret", "billing"), "topic secret"},
		{"pull retry topic is group", "127.0.0.1", pull("consumer1", "consumer-secret", "%RETRY%billing", "billing"), ""},
		{"pull other retry topic", "127.0.0.1", pull("consumer1", "consumer-secret", "%RETRY%blocked", "billing"), "group blocked"},
		{"send to retry topic needs group", "127.0.0.1", send("producer1", "producer-secret", "%RETRY%billing"), "SUB permission on group billing"},
		{"heartbeat allowed", "127.0.0.1", hb("consumer1", "consumer-secret", "billing", "orders"), ""},
		{"heartbeat denied group", "127.0.0.1", hb("consumer1", "consumer-secret", "blocked", "orders"), "group blocked"},
		{"heartbeat denied topic", "127.0.0.1", hb("consumer1", "consumer-secret", "billing", "secret"), "topic secret"},
		{"heartbeat producer only", "127.0.0.1", signed(remoting.ReqHeartBeat, "producer1", "producer-secret", nil,
			[]byte(`{"clientID":"c","producerDataSet":[{"groupName":"p"}],"consumerDataSet":[]}`)), ""},
		{"heartbeat bad body", "127.0.0.1", signed(remoting.ReqHeartBeat, "consumer1", "consumer-secret", nil, []byte(`{"consumerDataSet":5}`)), "cannot determine the resources"},
		{"update offset", "127.0.0.1", signed(remoting.ReqUpdateConsumerOffset, "consumer1", "consumer-secret",
			map[string]string{"consumerGroup": "billing", "topic": "orders", "queueId": "0", "commitOffset": "5"}, nil), ""},
		{"query offset denied", "127.0.0.1", signed(remoting.ReqQueryConsumerOffset, "consumer1", "consumer-secret",
			map[string]string{"consumerGroup": "blocked", "topic": "orders"}, nil), "group blocked"},
		{"max offset needs any", "127.0.0.1", signed(remoting.ReqGetMaxOffset, "producer1", "producer-secret",
			map[string]string{"topic": "orders", "queueId": "0"}, nil), ""},
		{"max offset denied", "127.0.0.1", signed(remoting.ReqGetMaxOffset, "producer1", "producer-secret",
			map[string]string{"topic": "other", "queueId": "0"}, nil), "no PUB or SUB permission"},
		{"send back", "127.0.0.1", signed(remoting.ReqConsumerSendMsgBack, "consumer1", "consumer-secret",
			map[string]string{"group": "blocked", "offset": "1"}, nil), "group blocked"},
		{"lock", "127.0.0.1", signed(remoting.ReqLockBatchMQ, "consumer1", "consumer-secret", nil,
			[]byte(`{"consumerGroup":"billing","clientId":"c","mqSet":[{"topic":"secret","brokerName":"b","queueId":0}]}`)), "topic secret"},
		{"unregister producer", "127.0.0.1", signed(remoting.ReqUnregisterClient, "producer1", "producer-secret",
			map[string]string{"clientID": "c", "producerGroup": "p", "consumerGroup": ""}, nil), ""},
		{"create topic needs admin", "127.0.0.1", signed(remoting.ReqUpdateAndCreateTopic, "producer1", "producer-secret",
			map[string]string{"topic": "orders"}, nil), "UPDATE_AND_CREATE_TOPIC needs an admin account"},
		{"admin creates topic", "127.0.0.1", signed(remoting.ReqUpdateAndCreateTopic, "admin001", "admin-secret",
			map[string]string{"topic": "orders"}, nil), ""},
		{"admin without rules may do all", "127.0.0.1", send("admin001", "admin-secret", "secret"), ""},
		{"admin with rules is bound by them", "127.0.0.1", send("admin002", "admin-secret", "orders"), "no PUB permission on topic orders"},
		{"trace topic", "127.0.0.1", send("consumer1", "consumer-secret", "RMQ_SYS_TRACE_TOPIC"), ""},
		{"auth-only code", "127.0.0.1", signed(remoting.ReqGetBrokerRuntimeInfo, "consumer1", "consumer-secret", nil, nil), ""},
		{"auth-only code bad sig", "127.0.0.1", signed(remoting.ReqGetBrokerRuntimeInfo, "consumer1", "x-secret!", nil, nil), "signature mismatch"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := a.Check(addr(c.remote), c.req)
			if c.deny == "" {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				return
			}
			var d *Denied
			if !errors.As(err, &d) || !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), c.deny) {
				t.Fatalf("err %v, want a denial containing %q", err, c.deny)
			}
			if d.Code != c.req.Code || d.Remote != addr(c.remote).String() {
				t.Fatalf("denial %+v", d)
			}
		})
	}
}

func TestCheckTampered(t *testing.T) {
	a, _ := testAuthorizer(t)
	base := func() *remoting.Command {
		return signed(remoting.ReqSendMessage, "producer1", "producer-secret",
			map[string]string{"topic": "orders", "producerGroup": "pg", "properties": "KEYS\x01k\x02"}, []byte("payload"))
	}
	if err := a.Check(addr("127.0.0.1"), base()); err != nil {
		t.Fatal(err)
	}
	tamper := map[string]func(*remoting.Command){
		"ext value":    func(c *remoting.Command) { c.ExtFields["topic"] = "audit" },
		"added ext":    func(c *remoting.Command) { c.ExtFields["queueId"] = "3" },
		"removed ext":  func(c *remoting.Command) { delete(c.ExtFields, "properties") },
		"body":         func(c *remoting.Command) { c.Body = []byte("payloaD") },
		"access key":   func(c *remoting.Command) { c.ExtFields[KeyAccessKey] = "consumer1" },
		"signature":    func(c *remoting.Command) { c.ExtFields[KeySignature] = "AAAA" + c.ExtFields[KeySignature][4:] },
		"no signature": func(c *remoting.Command) { delete(c.ExtFields, KeySignature) },
	}
	for name, f := range tamper {
		req := base()
		f(req)
		if err := a.Check(addr("127.0.0.1"), req); !errors.Is(err, ErrDenied) {
			t.Errorf("%s: err %v, want a denial", name, err)
		}
	}
}

// TestSignatureLimits records a weakness of the ACL 1.0 signature itself
// (the official clients compute it this way, so a compatible broker must
// accept it): values are concatenated in key order with no separators and
// the keys are not signed, so whoever captured a signed request can move
// characters between neighbouring values, or rename a key without changing
// its place in the order, and the signature still verifies. TLS is the
// defence (docs/security.md).
func TestSignatureLimits(t *testing.T) {
	a, _ := testAuthorizer(t)
	req := signed(remoting.ReqSendMessage, "producer1", "producer-secret",
		map[string]string{"topic": "orders", "producerGroup": "pg", "properties": "KEYS\x01k\x02"}, []byte("payload"))
	req.ExtFields["producerGroup"] = "p"
	req.ExtFields["properties"] = "gKEYS\x01k\x02"
	if err := a.Check(addr("127.0.0.1"), req); err != nil {
		t.Fatalf("shifted values were expected to verify (a known protocol limit): %v", err)
	}
	req = signed(remoting.ReqSendMessage, "producer1", "producer-secret",
		map[string]string{"topic": "orders", "producerGroup": "pg"}, []byte("payload"))
	req.ExtFields["producerGroup"], req.ExtFields["producerGroupX"] = "", "pg"
	if err := a.Check(addr("127.0.0.1"), req); err != nil {
		t.Fatalf("a renamed key was expected to verify (a known protocol limit): %v", err)
	}
}

func TestWrap(t *testing.T) {
	a, logs := testAuthorizer(t)
	var served int
	h := Wrap(remoting.HandlerFunc(func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
		served++
		return req.NewResponse(remoting.ResSuccess, "")
	}), a)
	ok := signed(remoting.ReqSendMessage, "producer1", "producer-secret", map[string]string{"topic": "orders"}, nil)
	if resp := h.Handle(context.Background(), nil, ok); resp.Code != remoting.ResSuccess || served != 1 {
		t.Fatalf("allowed request: %+v served=%d", resp, served)
	}
	bad := signed(remoting.ReqSendMessage, "producer1", "wrong-secret", map[string]string{"topic": "orders"}, nil)
	resp := h.Handle(context.Background(), nil, bad)
	if resp.Code != remoting.ResNoPermission || !strings.Contains(resp.Remark, "signature mismatch") || served != 1 {
		t.Fatalf("denied request: %+v served=%d", resp, served)
	}
	if resp.Opaque != bad.Opaque || !resp.IsResponse() {
		t.Fatalf("response does not answer the request: %+v", resp)
	}
	bad.Flag |= remoting.FlagOneway
	if resp := h.Handle(context.Background(), nil, bad); resp != nil {
		t.Fatalf("oneway denial answered: %+v", resp)
	}
	out := logs.String()
	if !strings.Contains(out, "acl: request denied") || !strings.Contains(out, "accessKey=producer1") ||
		!strings.Contains(out, "request=SEND_MESSAGE") || !strings.Contains(out, "code=10") {
		t.Fatalf("log: %s", out)
	}
	for _, secret := range []string{"producer-secret", "wrong-secret"} {
		if strings.Contains(out, secret) || strings.Contains(resp2str(resp), secret) {
			t.Fatalf("secret %q in log or response: %s", secret, out)
		}
	}
	if Wrap(h, nil) == nil {
		t.Fatal("Wrap with a nil Authorizer")
	}
}

func resp2str(c *remoting.Command) string {
	if c == nil {
		return ""
	}
	return c.Remark
}

func TestDenyLogRateLimit(t *testing.T) {
	l := rateLimiter{perSecond: 2}
	t0 := time.Unix(100, 0)
	for i, want := range []bool{true, true, false, false} {
		if _, ok := l.allow(t0); ok != want {
			t.Fatalf("event %d: %t", i, ok)
		}
	}
	if n, ok := l.allow(t0.Add(time.Second)); !ok || n != 2 {
		t.Fatalf("next second: %d %t", n, ok)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain_acl.yml")
	writeFile(t, path, testACL)
	log, logs := newLogger()
	a, err := New(Config{Path: path, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	req := func() *remoting.Command {
		return signed(remoting.ReqSendMessage, "producer1", "producer-secret", map[string]string{"topic": "newtopic"}, nil)
	}
	if err := a.Check(addr("127.0.0.1"), req()); err == nil {
		t.Fatal("newtopic allowed before the change")
	}
	if changed, err := a.Reload(); changed || err != nil {
		t.Fatalf("unchanged file: %t %v", changed, err)
	}
	writeFile(t, path, strings.Replace(testACL, "orders=PUB,", "orders=PUB, newtopic=PUB,", 1))
	if changed, err := a.Reload(); !changed || err != nil {
		t.Fatalf("changed file: %t %v", changed, err)
	}
	if err := a.Check(addr("127.0.0.1"), req()); err != nil {
		t.Fatalf("after reload: %v", err)
	}

	// A broken file keeps the rules in force, logged once at Error.
	writeFile(t, path, testACL+"  - accessKey: short\n")
	for range 3 {
		if changed, err := a.Reload(); changed || !errors.Is(err, ErrSyntax) {
			t.Fatalf("broken file: %t %v", changed, err)
		}
	}
	if err := a.Check(addr("127.0.0.1"), req()); err != nil {
		t.Fatalf("rules lost after a broken file: %v", err)
	}
	if n := strings.Count(logs.String(), "the changed ACL file is invalid"); n != 1 || !strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("%d error lines: %s", n, logs.String())
	}

	// A missing file keeps the rules too.
	os.Remove(path)
	if changed, err := a.Reload(); changed || err == nil {
		t.Fatalf("missing file: %t %v", changed, err)
	}
	if err := a.Check(addr("127.0.0.1"), req()); err != nil {
		t.Fatalf("rules lost after removal: %v", err)
	}
	if strings.Contains(logs.String(), "producer-secret") {
		t.Fatal("secret in the log")
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := New(Config{Path: filepath.Join(dir, "missing.yml")}); err == nil || !strings.Contains(err.Error(), "read ACL file") {
		t.Fatalf("missing: %v", err)
	}
	bad := filepath.Join(dir, "bad.yml")
	writeFile(t, bad, "accounts:\n  - accessKey: ab\n")
	if _, err := New(Config{Path: bad}); !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), bad+":2:") {
		t.Fatalf("bad: %v", err)
	}
	log, logs := newLogger()
	empty := filepath.Join(dir, "empty.yml")
	writeFile(t, empty, "")
	a, err := New(Config{Path: empty, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "every request is denied") {
		t.Fatalf("no warning for an empty file: %s", logs)
	}
	if err := a.Check(addr("127.0.0.1"), remoting.NewRequest(remoting.ReqHeartBeat, nil, nil)); err == nil {
		t.Fatal("empty rules allowed a request")
	}
}

// TestRunPicksUpChanges drives the poll loop with a read function that
// reports each call, so the test waits for polls instead of sleeping.
func TestRunPicksUpChanges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plain_acl.yml")
	writeFile(t, path, testACL)
	reads := make(chan struct{}, 100)
	a, err := New(Config{Path: path, PollInterval: time.Millisecond, ReadFile: func(p string) ([]byte, error) {
		data, err := os.ReadFile(p)
		select {
		case reads <- struct{}{}:
		default:
		}
		return data, err
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); a.Run(ctx) }()
	defer func() { cancel(); <-done }()
	writeFile(t, path, strings.Replace(testACL, "producer1", "producer9", 1))
	deadline := time.After(10 * time.Second)
	for a.Rules().Accounts["producer9"] == nil {
		select {
		case <-reads:
		case <-deadline:
			t.Fatal("the change was not picked up")
		}
	}
}

func TestAdminCredentials(t *testing.T) {
	r, err := Parse("t.yml", []byte("accounts:\n  - accessKey: adminKey1\n    secretKey: adminSecret1\n    admin: true\n"+
		"  - accessKey: plainKey1\n    secretKey: plainSecret1\n"))
	if err != nil {
		t.Fatal(err)
	}
	a := NewWithRules(r, nil)
	cases := []struct {
		ak, sk string
		want   bool
	}{
		{"adminKey1", "adminSecret1", true},
		{"adminKey1", "adminSecret2", false},
		{"plainKey1", "plainSecret1", false}, // not an admin
		{"nobody12", "adminSecret1", false},
		{"", "", false},
	}
	for _, c := range cases {
		if got := a.AdminCredentials(c.ak, c.sk); got != c.want {
			t.Errorf("AdminCredentials(%q, %q) = %v, want %v", c.ak, c.sk, got, c.want)
		}
	}
}
