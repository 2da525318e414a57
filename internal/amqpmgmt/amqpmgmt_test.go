package amqpmgmt

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/amqpinfo"
)

// fakeSource serves fixed snapshots.
type fakeSource struct {
	queues    []amqpinfo.Queue
	exchanges []amqpinfo.Exchange
	bindings  []amqpinfo.Binding
	conns     []amqpinfo.ConnectionDetail
	channels  []amqpinfo.Channel
	consumers []amqpinfo.Consumer
	vhosts    []string
	qargs     map[string]map[string]any // by vhost/name
	xargs     map[string]map[string]any
	closed    []string // "name: reason" of every ForceClose that found its connection
}

func (f *fakeSource) Queues() []amqpinfo.Queue                       { return f.queues }
func (f *fakeSource) Exchanges() []amqpinfo.Exchange                 { return f.exchanges }
func (f *fakeSource) Bindings() []amqpinfo.Binding                   { return f.bindings }
func (f *fakeSource) ConnectionDetails() []amqpinfo.ConnectionDetail { return f.conns }
func (f *fakeSource) Channels() []amqpinfo.Channel                   { return f.channels }
func (f *fakeSource) Consumers() []amqpinfo.Consumer                 { return f.consumers }
func (f *fakeSource) VhostNames() []string                           { return f.vhosts }

func (f *fakeSource) ForceClose(name, reason string) bool {
	for _, c := range f.conns {
		if c.Name == name {
			f.closed = append(f.closed, name+": "+reason)
			return true
		}
	}
	return false
}

func (f *fakeSource) QueueArguments(vhost, name string) map[string]any {
	return f.qargs[vhost+"/"+name]
}

func (f *fakeSource) ExchangeArguments(vhost, name string) map[string]any {
	return f.xargs[vhost+"/"+name]
}

func testSource() *fakeSource {
	return &fakeSource{
		vhosts: []string{"/", "prod"},
		qargs:  map[string]map[string]any{"//alpha": {"x-max-length": int64(10)}},
		xargs:  map[string]map[string]any{"//logs": {"alternate-exchange": "amq.fanout"}},
		queues: []amqpinfo.Queue{
			{Vhost: "/", Name: "alpha", Durable: true, Ready: 3, Unacked: 1, Consumers: 1, Published: 4},
			{Vhost: "/", Name: "beta", Type: "quorum", Ready: 7},
			{Vhost: "prod", Name: "alpha", Ready: 1},
		},
		exchanges: []amqpinfo.Exchange{{Vhost: "/", Name: "logs", Type: "fanout", Durable: true}},
		bindings:  []amqpinfo.Binding{{Vhost: "/", Source: "logs", Destination: "alpha", DestinationType: "queue", RoutingKey: ""}},
		conns: []amqpinfo.ConnectionDetail{{Name: "127.0.0.1:1 -> 127.0.0.1:5672", Vhost: "/", User: "guest", Channels: 1,
			ClientProperties: map[string]any{"connection_name": "billing-worker"}}},
		channels:  []amqpinfo.Channel{{Connection: "127.0.0.1:1 -> 127.0.0.1:5672", Number: 1, Vhost: "/", User: "guest", Consumers: 1, Unacked: 1}},
		consumers: []amqpinfo.Consumer{{Connection: "127.0.0.1:1 -> 127.0.0.1:5672", Channel: 1, Vhost: "/", Tag: "c1", Queue: "alpha", AckRequired: true}},
	}
}

// testServer serves the API over src; logins are guest/guest, and the
// remote address every login saw is recorded.
func testServer(t *testing.T, src Source) (*httptest.Server, *[]net.Addr) {
	var remotes []net.Addr
	h := Handler(Config{Source: src, Node: "keel@test", Version: "v0", Login: func(u, p string, remote net.Addr) bool {
		remotes = append(remotes, remote)
		return u == "guest" && p == "guest"
	}})
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s, &remotes
}

func do(t *testing.T, method, url, user, pass string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(""))
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
	return resp.StatusCode, resp.Header, b
}

func get(t *testing.T, s *httptest.Server, path string, v any) {
	t.Helper()
	code, _, b := do(t, "GET", s.URL+path, "guest", "guest")
	if code != 200 {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	reflect.ValueOf(v).Elem().SetZero() // Unmarshal would merge into maps decoded before
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
}

func TestLoginRequired(t *testing.T) {
	s, remotes := testServer(t, testSource())
	for _, c := range []struct{ user, pass string }{{"", ""}, {"guest", "wrong"}, {"other", "guest"}} {
		code, h, b := do(t, "GET", s.URL+"/api/queues", c.user, c.pass)
		if code != http.StatusUnauthorized || !strings.Contains(h.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("%q/%q: %d, challenge %q", c.user, c.pass, code, h.Get("WWW-Authenticate"))
		}
		var e errorBody
		if err := json.Unmarshal(b, &e); err != nil || e.Error != "not_authorized" {
			t.Errorf("%q/%q: body %s", c.user, c.pass, b)
		}
	}
	// The login check is given the peer's address (guest is loopback-only).
	if len(*remotes) != 2 { // no credentials: not asked
		t.Fatalf("login asked %d times, want 2", len(*remotes))
	}
	if ta, ok := (*remotes)[0].(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
		t.Errorf("login saw remote %v, want the loopback peer", (*remotes)[0])
	}
}

// TestCloseConnection: DELETE /api/connections/{name} closes that
// connection with RabbitMQ's default reason or X-Reason; 404 for a name
// that is not open; no other DELETE is served.
func TestCloseConnection(t *testing.T) {
	src := testSource()
	s, _ := testServer(t, src)
	name := src.conns[0].Name
	path := s.URL + "/api/connections/" + url.PathEscape(name)
	if code, _, b := do(t, "DELETE", path, "guest", "guest"); code != http.StatusNoContent || len(b) != 0 {
		t.Errorf("DELETE %s: %d %q, want 204", name, code, b)
	}
	req, _ := http.NewRequest("DELETE", path, nil)
	req.SetBasicAuth("guest", "guest")
	req.Header.Set("X-Reason", "moving to another node")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE with X-Reason: %d", resp.StatusCode)
	}
	want := []string{name + ": Closed via management plugin", name + ": moving to another node"}
	if fmt.Sprint(src.closed) != fmt.Sprint(want) {
		t.Errorf("closed %q, want %q", src.closed, want)
	}
	if code, _, _ := do(t, "DELETE", s.URL+"/api/connections/nobody", "guest", "guest"); code != http.StatusNotFound {
		t.Errorf("DELETE of an unknown connection: %d, want 404", code)
	}
	if code, _, _ := do(t, "DELETE", path, "", ""); code != http.StatusUnauthorized || len(src.closed) != 2 {
		t.Errorf("DELETE without credentials: %d (closed %d)", code, len(src.closed))
	}
}

func TestReadOnly(t *testing.T) {
	s, _ := testServer(t, testSource())
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		code, h, b := do(t, m, s.URL+"/api/queues/%2F/alpha", "guest", "guest")
		var e errorBody
		if code != http.StatusMethodNotAllowed || json.Unmarshal(b, &e) != nil || e.Error != "method_not_allowed" || h.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d %q %s", m, code, h.Get("Allow"), b)
		}
	}
	if code, _, b := do(t, "HEAD", s.URL+"/api/queues", "guest", "guest"); code != http.StatusOK || len(b) != 0 {
		t.Errorf("HEAD: %d %q", code, b)
	}
	// Without credentials a write is refused as unauthenticated first.
	if code, _, _ := do(t, "DELETE", s.URL+"/api/queues/%2F/alpha", "", ""); code != http.StatusUnauthorized {
		t.Errorf("DELETE without credentials: %d", code)
	}
}

func TestQueues(t *testing.T) {
	s, _ := testServer(t, testSource())
	var qs []map[string]any
	get(t, s, "/api/queues", &qs)
	if len(qs) != 3 {
		t.Fatalf("%d queues: %v", len(qs), qs)
	}
	q := qs[0]
	want := map[string]any{"name": "alpha", "vhost": "/", "durable": true, "auto_delete": false, "exclusive": false,
		"messages": 4.0, "messages_ready": 3.0, "messages_unacknowledged": 1.0, "consumers": 1.0, "state": "running",
		"type": "classic", "node": "keel@test"}
	for k, v := range want {
		if q[k] != v {
			t.Errorf("%s = %#v, want %#v", k, q[k], v)
		}
	}
	if a, _ := q["arguments"].(map[string]any); a["x-max-length"] != 10.0 {
		t.Errorf("arguments %v", q["arguments"])
	}
	if ms, _ := q["message_stats"].(map[string]any); ms["publish"] != 4.0 {
		t.Errorf("message_stats %v", q["message_stats"])
	}
	if a, ok := qs[1]["arguments"].(map[string]any); !ok || len(a) != 0 || qs[1]["type"] != "quorum" {
		t.Errorf("second queue: arguments %#v type %v", qs[1]["arguments"], qs[1]["type"])
	}

	get(t, s, "/api/queues/prod", &qs)
	if len(qs) != 1 || qs[0]["vhost"] != "prod" {
		t.Errorf("/api/queues/prod: %v", qs)
	}
	get(t, s, "/api/queues/%2F/", &qs) // a trailing slash
	if len(qs) != 2 {
		t.Errorf("/api/queues/%%2F/: %v", qs)
	}
	var one map[string]any
	get(t, s, "/api/queues/%2F/beta", &one)
	if one["name"] != "beta" || one["messages"] != 7.0 {
		t.Errorf("/api/queues/%%2F/beta: %v", one)
	}
	for _, p := range []string{"/api/queues/%2F/nope", "/api/queues/nohost", "/api/queues/nohost/alpha", "/api/nothing", "/api/queues/%2F/a/b", "/other"} {
		code, _, b := do(t, "GET", s.URL+p, "guest", "guest")
		var e errorBody
		if code != http.StatusNotFound || json.Unmarshal(b, &e) != nil || e.Error != "Object Not Found" {
			t.Errorf("GET %s: %d %s, want 404 Object Not Found", p, code, b)
		}
	}
}

// TestRabbitmqadminListQueues makes the request `rabbitmqadmin list
// queues` makes (3.10: the table's columns as a query) and reads the
// answer as it does.
func TestRabbitmqadminListQueues(t *testing.T) {
	s, _ := testServer(t, testSource())
	var qs []map[string]any
	get(t, s, "/api/queues?columns=name,messages", &qs)
	if len(qs) != 3 {
		t.Fatalf("%v", qs)
	}
	for _, q := range qs {
		if len(q) != 2 || q["name"] == nil || q["messages"] == nil {
			t.Errorf("columns=name,messages gave %v", q)
		}
	}
	get(t, s, "/api/queues?columns=name,message_stats.publish,nosuch", &qs)
	if ms, _ := qs[0]["message_stats"].(map[string]any); len(qs[0]) != 2 || len(ms) != 1 || ms["publish"] != 4.0 {
		t.Errorf("dotted column: %v", qs[0])
	}
}

func TestListParameters(t *testing.T) {
	s, _ := testServer(t, testSource())
	var qs []map[string]any
	get(t, s, "/api/queues?sort=messages&sort_reverse=true&columns=name,vhost,messages", &qs)
	if len(qs) != 3 || qs[0]["name"] != "beta" || qs[2]["messages"] != 1.0 {
		t.Errorf("sorted by messages, reversed: %v", qs)
	}
	get(t, s, "/api/queues?name=alp", &qs)
	if len(qs) != 2 {
		t.Errorf("name=alp: %v", qs)
	}
	get(t, s, "/api/queues?name=%5Eb&use_regex=true", &qs)
	if len(qs) != 1 || qs[0]["name"] != "beta" {
		t.Errorf("name=^b regex: %v", qs)
	}
	var raw map[string]any
	get(t, s, "/api/queues?page=2&page_size=2", &raw)
	if items, _ := raw["items"].([]any); len(items) != 1 || raw["page"] != 2.0 || raw["page_count"] != 2.0 || raw["item_count"] != 1.0 ||
		raw["filtered_count"] != 3.0 || raw["total_count"] != 3.0 || raw["page_size"] != 2.0 {
		t.Errorf("page 2 of 2: %v", raw)
	}
	for _, q := range []string{"page=0", "page=x", "page_size=501", "page=3&page_size=2", "name=(&use_regex=true"} {
		code, _, b := do(t, "GET", s.URL+"/api/queues?"+q, "guest", "guest")
		if code != http.StatusBadRequest || !strings.Contains(string(b), `"bad_request"`) {
			t.Errorf("?%s: %d %s, want 400", q, code, b)
		}
	}
}

func TestOtherObjects(t *testing.T) {
	s, _ := testServer(t, testSource())
	var ex []map[string]any
	get(t, s, "/api/exchanges/%2F", &ex)
	if len(ex) != 2 || ex[0]["name"] != "" || ex[0]["type"] != "direct" || ex[1]["name"] != "logs" || ex[1]["type"] != "fanout" ||
		ex[1]["arguments"].(map[string]any)["alternate-exchange"] != "amq.fanout" {
		t.Errorf("exchanges of /: %v", ex)
	}
	var e map[string]any
	get(t, s, "/api/exchanges/%2F/amq.default", &e)
	if e["name"] != "" {
		t.Errorf("amq.default: %v", e)
	}
	var bs []map[string]any
	get(t, s, "/api/bindings/%2F", &bs)
	// The default exchange's binding of each queue, then the one made.
	if len(bs) != 3 || bs[0]["source"] != "" || bs[0]["routing_key"] != "alpha" || bs[2]["source"] != "logs" ||
		bs[2]["destination_type"] != "queue" || bs[2]["properties_key"] != "~" {
		t.Errorf("bindings of /: %v", bs)
	}
	var cs []map[string]any
	get(t, s, "/api/connections", &cs)
	if len(cs) != 1 || cs[0]["name"] != "127.0.0.1:1 -> 127.0.0.1:5672" || cs[0]["channels"] != 1.0 || cs[0]["protocol"] != "AMQP 0-9-1" ||
		cs[0]["user_provided_name"] != "billing-worker" || field(cs[0], "client_properties.connection_name") != "billing-worker" {
		t.Errorf("connections: %v", cs)
	}
	var ch map[string]any
	get(t, s, "/api/channels/"+strings.ReplaceAll("127.0.0.1:1 -> 127.0.0.1:5672 (1)", " ", "%20"), &ch)
	if ch["number"] != 1.0 || ch["consumer_count"] != 1.0 || ch["messages_unacknowledged"] != 1.0 {
		t.Errorf("channel: %v", ch)
	}
	var cons []map[string]any
	get(t, s, "/api/consumers/%2F", &cons)
	if len(cons) != 1 || cons[0]["consumer_tag"] != "c1" || cons[0]["queue"].(map[string]any)["name"] != "alpha" {
		t.Errorf("consumers: %v", cons)
	}
	get(t, s, "/api/consumers/prod", &cons)
	if len(cons) != 0 {
		t.Errorf("consumers of prod: %v", cons)
	}
	var vs []map[string]any
	get(t, s, "/api/vhosts", &vs)
	if len(vs) != 2 || vs[0]["name"] != "/" || vs[0]["messages"] != 11.0 || vs[1]["messages_ready"] != 1.0 {
		t.Errorf("vhosts: %v", vs)
	}
	var o map[string]any
	get(t, s, "/api/overview", &o)
	tot, _ := o["object_totals"].(map[string]any)
	qt, _ := o["queue_totals"].(map[string]any)
	if o["rabbitmq_version"] != CompatVersion || o["product_name"] != "Keel" || tot["queues"] != 3.0 || tot["exchanges"] != 3.0 ||
		tot["connections"] != 1.0 || tot["consumers"] != 1.0 || qt["messages"] != 12.0 || qt["messages_unacknowledged"] != 1.0 {
		t.Errorf("overview: %v", o)
	}
	var w map[string]any
	get(t, s, "/api/whoami", &w)
	if w["name"] != "guest" {
		t.Errorf("whoami: %v", w)
	}
}

func field(o map[string]any, path string) any {
	var v any = o
	for _, k := range strings.Split(path, ".") {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}
