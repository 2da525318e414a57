package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

var amqpMgmtListenRE = regexp.MustCompile(`msg="amqp management listening" component=amqp-management addr=(\S+)`)

// startServeMgmt runs keel serve with the AMQP listener and the AMQP
// management listener on free loopback ports, with conf added to
// broker.conf; it returns the two addresses.
func startServeMgmt(t *testing.T, conf string) (string, string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", t.TempDir(), "--namesrv-listen", "127.0.0.1:0",
		"--amqp-listen", "127.0.0.1:0", "--kafka-listen", "", "--broker-listen", "127.0.0.1:0", "--http-listen", "",
		"-c", writeConf(t, "mapedFileSizeCommitLog=16777216\namqpManagementListen=127.0.0.1:0\n"+conf))
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var amqpAddr, mgmtAddr string
	waitFor(t, "the AMQP and management listeners", 30*time.Second, func() bool {
		if m := amqpListenRE.FindStringSubmatch(logs.String()); m != nil {
			amqpAddr = m[1]
		}
		if m := amqpMgmtListenRE.FindStringSubmatch(logs.String()); m != nil {
			mgmtAddr = m[1]
		}
		return amqpAddr != "" && mgmtAddr != ""
	})
	return amqpAddr, mgmtAddr, logs
}

// mgmtGet GETs path with HTTP Basic user:pass and returns the status and
// body.
func mgmtGet(t *testing.T, addr, path, user, pass string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// mgmtList GETs a list as guest.
func mgmtList(t *testing.T, addr, path string) []map[string]any {
	t.Helper()
	code, b := mgmtGet(t, addr, path, "guest", "guest")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	var out []map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
	return out
}

func mgmtObject(t *testing.T, addr, path string) map[string]any {
	t.Helper()
	code, b := mgmtGet(t, addr, path, "guest", "guest")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
	return out
}

// field reads a dotted path of a decoded JSON object.
func field(o map[string]any, path string) any {
	var v any = o
	for _, k := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

// mismatch returns the fields of o that differ from want, "" if none.
func mismatch(o map[string]any, want map[string]any) string {
	var bad []string
	for k, w := range want {
		if got := field(o, k); fmt.Sprint(got) != fmt.Sprint(w) {
			bad = append(bad, fmt.Sprintf("%s=%v (want %v)", k, got, w))
		}
	}
	return strings.Join(bad, ", ")
}

func find(list []map[string]any, key, value string) map[string]any {
	for _, o := range list {
		if field(o, key) == value {
			return o
		}
	}
	return nil
}

// TestAMQPManagementAPI: keel serve with amqpManagementListen serves
// RabbitMQ's management API over what amqp091-go clients did: queues
// with their counts, exchanges, bindings, connections, channels and
// consumers, the vhosts and the overview; rabbitmqadmin's request for
// `list queues`; 401 without guest's credentials; 405 for a write.
func TestAMQPManagementAPI(t *testing.T) {
	amqpAddr, mgmt, logs := startServeMgmt(t, "amqpVhosts=prod\n")

	c1, err := amqp091.Dial("amqp://guest:guest@" + amqpAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	ch, err := c1.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("orders", true, false, false, false, amqp091.Table{"x-message-ttl": int32(600000)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("events", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("orders", "order.*", "events", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		dc, err := ch.PublishWithDeferredConfirm("events", "order.new", false, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i)), DeliveryMode: 2})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	cons, err := c1.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Qos(3, 0, false); err != nil {
		t.Fatal(err)
	}
	deliveries, err := cons.Consume("orders", "watcher", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 { // prefetch 3: three deliveries, unacknowledged
		select {
		case <-deliveries:
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
		}
	}

	c2, err := amqp091.Dial("amqp://guest:guest@" + amqpAddr + "/prod")
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	ch2, err := c2.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch2.QueueDeclare("p1", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := ch2.Publish("", "p1", false, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}

	// Counts settle as the broker stores and delivers.
	var last string
	waitFor(t, "the queues' counts", 10*time.Second, func() bool {
		q := find(mgmtList(t, mgmt, "/api/queues"), "name", "orders")
		p := find(mgmtList(t, mgmt, "/api/queues/prod"), "name", "p1")
		last = fmt.Sprint(q, p)
		return q != nil && p != nil && mismatch(q, map[string]any{"messages": 10, "messages_ready": 7,
			"messages_unacknowledged": 3, "consumers": 1}) == "" && field(p, "messages") == 2.0
	})
	q := mgmtObject(t, mgmt, "/api/queues/%2F/orders")
	if bad := mismatch(q, map[string]any{"name": "orders", "vhost": "/", "durable": true, "auto_delete": false, "exclusive": false,
		"arguments.x-message-ttl": 600000, "messages": 10, "messages_ready": 7, "messages_unacknowledged": 3, "consumers": 1,
		"state": "running", "type": "classic", "node": "keel@broker-a", "message_stats.publish": 10, "message_stats.deliver_get": 3}); bad != "" {
		t.Errorf("queue orders: %s (after %s)", bad, last)
	}
	if qs := mgmtList(t, mgmt, "/api/queues"); len(qs) != 2 {
		t.Errorf("%d queues, want orders and p1: %v", len(qs), qs)
	}

	// rabbitmqadmin 3.10's `list queues`: GET /api/queues?columns=name,messages.
	qs := mgmtList(t, mgmt, "/api/queues?columns=name,messages")
	if len(qs) != 2 || len(qs[0]) != 2 || qs[0]["name"] != "orders" || qs[0]["messages"] != 10.0 || qs[1]["name"] != "p1" {
		t.Errorf("rabbitmqadmin's list queues request: %v", qs)
	}

	ex := mgmtObject(t, mgmt, "/api/exchanges/%2F/events")
	if bad := mismatch(ex, map[string]any{"name": "events", "vhost": "/", "type": "topic", "durable": true, "auto_delete": false, "internal": false}); bad != "" {
		t.Errorf("exchange events: %s", bad)
	}
	if exs := mgmtList(t, mgmt, "/api/exchanges/%2F"); find(exs, "name", "") == nil || find(exs, "name", "amq.topic") == nil || len(exs) != 7 {
		t.Errorf("exchanges of /: want the default, 5 amq.* and events: %v", exs)
	}

	bs := mgmtList(t, mgmt, "/api/bindings/%2F")
	if len(bs) != 2 || mismatch(bs[0], map[string]any{"source": "", "destination": "orders", "routing_key": "orders", "destination_type": "queue"}) != "" ||
		mismatch(bs[1], map[string]any{"source": "events", "destination": "orders", "routing_key": "order.*", "destination_type": "queue", "vhost": "/"}) != "" {
		t.Errorf("bindings of /: %v", bs)
	}

	conns := mgmtList(t, mgmt, "/api/connections")
	if len(conns) != 2 {
		t.Fatalf("%d connections, want 2: %v", len(conns), conns)
	}
	name1 := c1.LocalAddr().String() + " -> " + amqpAddr
	cn := find(conns, "name", name1)
	if cn == nil {
		t.Fatalf("no connection named %q: %v", name1, conns)
	}
	host, port, _ := net.SplitHostPort(c1.LocalAddr().String())
	if bad := mismatch(cn, map[string]any{"vhost": "/", "user": "guest", "channels": 2, "peer_host": host, "peer_port": port,
		"protocol": "AMQP 0-9-1", "auth_mechanism": "PLAIN", "ssl": false, "state": "running",
		"client_properties.product": "AMQP 0.9.1 Client", "timeout": 10, "frame_max": 131072}); bad != "" {
		t.Errorf("connection: %s", bad)
	}
	if cn2 := find(conns, "vhost", "prod"); cn2 == nil || cn2["channels"] != 1.0 {
		t.Errorf("connection to prod: %v", cn2)
	}

	chs := mgmtList(t, mgmt, "/api/channels")
	cc := find(chs, "name", name1+" (2)")
	if len(chs) != 3 || cc == nil {
		t.Fatalf("channels: %v", chs)
	}
	if bad := mismatch(cc, map[string]any{"number": 2, "consumer_count": 1, "messages_unacknowledged": 3, "prefetch_count": 3,
		"connection_details.name": name1, "user": "guest", "vhost": "/"}); bad != "" {
		t.Errorf("consuming channel: %s", bad)
	}

	cs := mgmtList(t, mgmt, "/api/consumers")
	if len(cs) != 1 || mismatch(cs[0], map[string]any{"consumer_tag": "watcher", "queue.name": "orders", "queue.vhost": "/",
		"ack_required": true, "prefetch_count": 3, "channel_details.number": 2, "channel_details.connection_name": name1}) != "" {
		t.Errorf("consumers: %v", cs)
	}
	if cs := mgmtList(t, mgmt, "/api/consumers/prod"); len(cs) != 0 {
		t.Errorf("consumers of prod: %v", cs)
	}

	vs := mgmtList(t, mgmt, "/api/vhosts")
	if len(vs) != 2 || mismatch(find(vs, "name", "/"), map[string]any{"messages": 10}) != "" || mismatch(find(vs, "name", "prod"), map[string]any{"messages": 2}) != "" {
		t.Errorf("vhosts: %v", vs)
	}
	ov := mgmtObject(t, mgmt, "/api/overview")
	if bad := mismatch(ov, map[string]any{"object_totals.connections": 2, "object_totals.channels": 3, "object_totals.consumers": 1,
		"object_totals.queues": 2, "object_totals.exchanges": 13, "queue_totals.messages": 12, "queue_totals.messages_unacknowledged": 3,
		"product_name": "Keel", "rabbitmq_version": "3.10.8", "node": "keel@broker-a"}); bad != "" {
		t.Errorf("overview: %s", bad)
	}
	if ls, _ := ov["listeners"].([]any); len(ls) != 1 || fmt.Sprint(ls[0].(map[string]any)["port"]) != amqpAddr[strings.LastIndex(amqpAddr, ":")+1:] {
		t.Errorf("overview listeners: %v", ov["listeners"])
	}
	if w := mgmtObject(t, mgmt, "/api/whoami"); w["name"] != "guest" {
		t.Errorf("whoami: %v", w)
	}

	// Refusals: no credentials, a wrong password; a write.
	for _, u := range [][2]string{{"", ""}, {"guest", "nope"}} {
		if code, b := mgmtGet(t, mgmt, "/api/queues", u[0], u[1]); code != http.StatusUnauthorized || !strings.Contains(string(b), "not_authorized") {
			t.Errorf("GET as %q/%q: %d %s, want 401", u[0], u[1], code, b)
		}
	}
	req, _ := http.NewRequest("DELETE", "http://"+mgmt+"/api/queues/%2F/orders", nil)
	req.SetBasicAuth("guest", "guest")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE: %d, want 405", resp.StatusCode)
	}
	if mgmtList(t, mgmt, "/api/queues/%2F/")[0]["name"] != "orders" {
		t.Error("the DELETE removed the queue")
	}

	// An operator closes the consumer's connection (rabbitmqadmin's close
	// connection): the client is told 320 with the reason, its deliveries
	// are ready again. A name that is not open is 404.
	closed := c1.NotifyClose(make(chan *amqp091.Error, 1))
	del := func(name, reason string) int {
		req, _ := http.NewRequest("DELETE", "http://"+mgmt+"/api/connections/"+url.PathEscape(name), nil)
		req.SetBasicAuth("guest", "guest")
		if reason != "" {
			req.Header.Set("X-Reason", reason)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := del("127.0.0.1:1 -> "+amqpAddr, ""); code != http.StatusNotFound {
		t.Errorf("DELETE of a connection that is not open: %d, want 404", code)
	}
	if code := del(name1, "maintenance window"); code != http.StatusNoContent {
		t.Fatalf("DELETE /api/connections/%s: %d, want 204", name1, code)
	}
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 || !e.Server || e.Reason != "CONNECTION_FORCED - maintenance window" {
			t.Errorf("the closed client got %+v, want 320 CONNECTION_FORCED - maintenance window from the server", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client was not closed")
	}
	waitFor(t, "the closed connection's deliveries back", 10*time.Second, func() bool {
		q := mgmtObject(t, mgmt, "/api/queues/%2F/orders")
		return mismatch(q, map[string]any{"messages_ready": 10, "messages_unacknowledged": 0, "consumers": 0}) == "" &&
			len(mgmtList(t, mgmt, "/api/connections")) == 1 && len(mgmtList(t, mgmt, "/api/channels")) == 1
	})
	if !strings.Contains(logs.String(), `msg="amqp management: login refused"`) {
		t.Error("refused logins were not logged")
	}
	if !strings.Contains(logs.String(), `msg="amqp: connection closed by an operator"`) {
		t.Error("the operator's close was not logged")
	}
}

// TestAMQPManagementACL: with aclEnable=true an admin account of
// plain_acl.yml reads the API; a non-admin account and guest get 401.
func TestAMQPManagementACL(t *testing.T) {
	aclFile := filepath.Join(t.TempDir(), "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(securityACL+`  - accessKey: reader01
    secretKey: reader-secret
    defaultTopicPerm: PUB|SUB
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, mgmt, _ := startServeMgmt(t, "aclEnable=true\naclFile="+aclFile+"\n")
	if code, b := mgmtGet(t, mgmt, "/api/whoami", "admin001", "admin-secret"); code != 200 || !strings.Contains(string(b), `"name":"admin001"`) {
		t.Errorf("admin account: %d %s", code, b)
	}
	for _, u := range [][2]string{{"reader01", "reader-secret"}, {"guest", "guest"}, {"admin001", "wrong"}} {
		if code, b := mgmtGet(t, mgmt, "/api/queues", u[0], u[1]); code != http.StatusUnauthorized {
			t.Errorf("%s: %d %s, want 401", u[0], code, b)
		}
	}
}

// TestAMQPManagementExposure: a management listener needs the AMQP door,
// and beyond loopback aclEnable=true (guest logs in from loopback only);
// the default is off.
func TestAMQPManagementExposure(t *testing.T) {
	b, _, _, _, err := loadWith(t)
	if err != nil {
		t.Fatal(err)
	}
	if b.AMQPManagementListen != "" {
		t.Errorf("default amqpManagementListen %q, want off", b.AMQPManagementListen)
	}
	public := &net.TCPAddr{IP: net.IPv4zero, Port: 15672}
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 15672}
	cases := []struct {
		name  string
		addr  net.Addr
		conf  string
		allow bool
	}{
		{"loopback", local, "", true},
		{"every interface", public, "", false},
		{"every interface, httpToken", public, "httpToken=t0ken-123\n", false},
		{"every interface, ACL", public, "aclEnable=true\n", true},
		{"no AMQP door", local, "amqpListen=\n", false},
		{"only amqps", local, "amqpListen=\namqpsListen=127.0.0.1:5671\ntlsServerCertPath=/c.pem\ntlsServerKeyPath=/k.pem\n", true},
	}
	for _, c := range cases {
		cfg, _, _, _, err := loadWith(t, "-c", writeConf(t, "amqpManagementListen=:15672\n"+c.conf))
		if err != nil {
			t.Fatal(err)
		}
		err = checkAMQPManagementExposure(cfg, boundListeners{listenAMQPManagement: fakeListener{addr: c.addr}})
		if (err == nil) != c.allow {
			t.Errorf("%s: err = %v, want allowed=%v", c.name, err, c.allow)
		}
		if err != nil && !strings.Contains(err.Error(), "set aclEnable=true") && !strings.Contains(err.Error(), "set amqpListen or amqpsListen") {
			t.Errorf("%s: error does not say what to do: %v", c.name, err)
		}
	}
}

// rabbitmqadmin is the management CLI Debian's rabbitmq-server package
// installs (a Python 3 script); $KEEL_RABBITMQADMIN names another copy.
func rabbitmqadmin(t *testing.T) string {
	t.Helper()
	path := os.Getenv("KEEL_RABBITMQADMIN")
	if path == "" {
		path = "/usr/bin/rabbitmqadmin"
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("SKIPPED: no rabbitmqadmin at %s (install Debian's rabbitmq-server, or set KEEL_RABBITMQADMIN to the script)", path)
	}
	return path
}

// TestAMQPManagementRabbitmqadmin runs rabbitmqadmin's list commands
// against keel serve.
func TestAMQPManagementRabbitmqadmin(t *testing.T) {
	admin := rabbitmqadmin(t)
	amqpAddr, mgmt, _ := startServeMgmt(t, "")
	c, err := amqp091.Dial("amqp://guest:guest@" + amqpAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("jobs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		dc, err := ch.PublishWithDeferredConfirm("", "jobs", false, false, amqp091.Publishing{Body: []byte("j")})
		if err != nil || !dc.Wait() {
			t.Fatal(err)
		}
	}
	_, port, _ := net.SplitHostPort(mgmt)
	run := func(args ...string) string {
		out, err := exec.Command(pythonWithPika, append([]string{admin, "-H", "127.0.0.1", "-P", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("rabbitmqadmin %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	row := regexp.MustCompile(`\|\s*jobs\s*\|\s*4\s*\|`)
	if out := run("list", "queues"); !row.MatchString(out) {
		t.Errorf("list queues:\n%s", out)
	}
	if out := run("-V", "/", "list", "queues", "name", "messages_ready", "durable"); !regexp.MustCompile(`\|\s*jobs\s*\|\s*4\s*\|\s*True\s*\|`).MatchString(out) {
		t.Errorf("list queues name messages_ready durable:\n%s", out)
	}
	if out := run("list", "connections"); !strings.Contains(out, c.LocalAddr().String()+" -> "+amqpAddr) {
		t.Errorf("list connections:\n%s", out)
	}
	if out := run("list", "bindings"); !regexp.MustCompile(`\|\s*\|\s*jobs\s*\|\s*jobs\s*\|`).MatchString(out) {
		t.Errorf("list bindings:\n%s", out)
	}
	if out := run("show", "overview"); !strings.Contains(out, "3.10.8") {
		t.Errorf("show overview:\n%s", out)
	}
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	run("close", "connection", "name="+c.LocalAddr().String()+" -> "+amqpAddr)
	select {
	case e := <-closed:
		if e == nil || e.Code != 320 || !strings.Contains(e.Reason, "Closed via management plugin") {
			t.Errorf("close connection: the client got %+v, want 320 Closed via management plugin", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("close connection: the client was not closed")
	}
	out, err := exec.Command(pythonWithPika, admin, "-H", "127.0.0.1", "-P", port, "declare", "queue", "name=other").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "405") {
		t.Errorf("declare queue: %v\n%s", err, out)
	}
	out, err = exec.Command(pythonWithPika, admin, "-H", "127.0.0.1", "-P", port, "-u", "guest", "-p", "wrong", "list", "queues").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "Access refused") {
		t.Errorf("wrong password: %v\n%s", err, out)
	}
}
