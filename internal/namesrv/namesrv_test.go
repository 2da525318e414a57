package namesrv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

const waitTimeout = 10 * time.Second

// fakeClock is an injectable clock for expiry tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// serve starts a remoting server for h on a loopback port.
func serve(t *testing.T, cfg remoting.ServerConfig, h remoting.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := remoting.NewServer(cfg, h)
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

func startNamesrv(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	ns := New(cfg)
	t.Cleanup(func() { ns.Close() })
	addr := serve(t, remoting.ServerConfig{OnConnClose: ns.OnConnClose}, ns.Handler())
	return ns, addr
}

func dial(t *testing.T, addr string) *remoting.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func call(t *testing.T, cl *remoting.Client, code int16, ext map[string]string, body []byte) *remoting.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(code, ext, body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func register(t *testing.T, cl *remoting.Client, reg Registration) RegisterResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := RegisterBrokerResult(ctx, cl, reg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func topics(names ...string) map[string]TopicConfig {
	m := make(map[string]TopicConfig)
	for _, n := range names {
		m[n] = TopicConfig{TopicName: n, ReadQueueNums: 4, WriteQueueNums: 4, Perm: PermReadWrite}
	}
	return m
}

func routeOf(t *testing.T, cl *remoting.Client, topic string) (*remoting.Command, string) {
	t.Helper()
	resp := call(t, cl, remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}, nil)
	return resp, string(resp.Body)
}

func TestRouteJSONExact(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	master := Registration{Cluster: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "10.0.0.1:10911",
		HAServerAddr: "10.0.0.1:10912", Topics: topics("T")}
	if res := register(t, cl, master); res != (RegisterResult{}) {
		t.Fatalf("master result %+v", res)
	}
	slave := master
	slave.BrokerID, slave.BrokerAddr, slave.HAServerAddr = 1, "10.0.0.2:10911", "10.0.0.2:10912"
	slave.Topics = topics("SlaveOnly") // a slave's topics are ignored
	if res := register(t, cl, slave); res.MasterAddr != "10.0.0.1:10911" || res.HAServerAddr != "10.0.0.1:10912" {
		t.Fatalf("slave result %+v", res)
	}
	resp, body := routeOf(t, cl, "T")
	want := `{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"},"brokerName":"broker-a",` +
		`"cluster":"DefaultCluster","enableActingMaster":false}],"filterServerTable":{},"queueDatas":[{"brokerName":` +
		`"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}`
	if resp.Code != remoting.ResSuccess || body != want {
		t.Fatalf("route %d\n got %s\nwant %s", resp.Code, body, want)
	}
	if resp, _ := routeOf(t, cl, "SlaveOnly"); resp.Code != remoting.ResTopicNotExist ||
		resp.Remark != "No topic route info in name server for the topic: SlaveOnly" {
		t.Fatalf("slave-only topic: %v", resp)
	}
}

func TestRouteListsOnlyBrokersHostingTopic(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	register(t, cl, Registration{Cluster: "C", BrokerName: "b", BrokerAddr: "h2:1", Topics: topics("T", "U")})
	register(t, cl, Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:1", Topics: topics("T")})
	register(t, cl, Registration{Cluster: "C", BrokerName: "c", BrokerAddr: "h3:1", Topics: topics("V")})
	var rd topicRouteData
	_, body := routeOf(t, cl, "T")
	if err := json.Unmarshal([]byte(body), &rd); err != nil {
		t.Fatal(err)
	}
	if len(rd.BrokerDatas) != 2 || rd.BrokerDatas[0].BrokerName != "a" || rd.BrokerDatas[1].BrokerName != "b" ||
		len(rd.QueueDatas) != 2 || rd.QueueDatas[0].BrokerName != "a" {
		t.Fatalf("route %s", body)
	}
	// Re-registration updates queue counts in place.
	tc := topics("T")
	tc["T"] = TopicConfig{ReadQueueNums: 8, WriteQueueNums: 2, Perm: PermRead}
	register(t, cl, Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:1", Topics: tc})
	_, body = routeOf(t, cl, "T")
	if !strings.Contains(body, `{"brokerName":"a","perm":4,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":2}`) {
		t.Fatalf("updated route %s", body)
	}
}

func TestExpiryWithInjectedClock(t *testing.T) {
	clock := newFakeClock()
	ns, addr := startNamesrv(t, Config{Now: clock.Now})
	cl := dial(t, addr)
	register(t, cl, Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:1", Topics: topics("T")})
	register(t, cl, Registration{Cluster: "C", BrokerName: "b", BrokerAddr: "h2:1", Topics: topics("T")})

	clock.Advance(100 * time.Second)
	if gone := ns.ExpireBrokers(); len(gone) != 0 {
		t.Fatalf("expired early: %v", gone)
	}
	register(t, cl, Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:1", Topics: topics("T")})
	clock.Advance(21 * time.Second) // b: 121 s silent, a: 21 s
	if gone := ns.ExpireBrokers(); len(gone) != 1 || gone[0] != "h2:1" {
		t.Fatalf("expired %v, want [h2:1]", gone)
	}
	_, body := routeOf(t, cl, "T")
	if strings.Contains(body, `"b"`) || !strings.Contains(body, `"brokerName":"a"`) {
		t.Fatalf("route after b expired: %s", body)
	}
	clock.Advance(121 * time.Second)
	if gone := ns.ExpireBrokers(); len(gone) != 1 || gone[0] != "h1:1" {
		t.Fatalf("expired %v, want [h1:1]", gone)
	}
	if resp, _ := routeOf(t, cl, "T"); resp.Code != remoting.ResTopicNotExist {
		t.Fatalf("route after all expired: %v", resp)
	}
	ci := clusterInfoOf(t, cl)
	if len(ci.BrokerAddrTable) != 0 || len(ci.ClusterAddrTable) != 0 {
		t.Fatalf("cluster info after expiry: %+v", ci)
	}
}

func TestPerBrokerHeartbeatTimeout(t *testing.T) {
	clock := newFakeClock()
	ns, addr := startNamesrv(t, Config{Now: clock.Now})
	cl := dial(t, addr)
	body, _ := encodeRegisterBody(topics("T"), clock.Now())
	resp := call(t, cl, remoting.ReqRegisterBroker, map[string]string{"clusterName": "C", "brokerName": "a",
		"brokerAddr": "h1:1", "brokerId": "0", "heartbeatTimeoutMillis": "10000"}, body)
	if resp.Code != remoting.ResSuccess {
		t.Fatal(resp)
	}
	clock.Advance(11 * time.Second)
	if gone := ns.ExpireBrokers(); len(gone) != 1 {
		t.Fatalf("expired %v", gone)
	}
}

func TestRunExpiresOnSchedule(t *testing.T) {
	clock := newFakeClock()
	ns, addr := startNamesrv(t, Config{Now: clock.Now, ScanInterval: 5 * time.Millisecond})
	runDone := make(chan error, 1)
	go func() { runDone <- ns.Run(context.Background()) }()
	cl := dial(t, addr)
	register(t, cl, Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:1", Topics: topics("T")})
	clock.Advance(DefaultBrokerTimeout + time.Second)
	waitFor(t, func() bool {
		resp, _ := routeOf(t, cl, "T")
		return resp.Code == remoting.ResTopicNotExist
	})
	ns.Close()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
}

func TestConnectionCloseUnregisters(t *testing.T) {
	ns := New(Config{})
	t.Cleanup(func() { ns.Close() })
	closed := make(chan struct{}, 16)
	addr := serve(t, remoting.ServerConfig{OnConnClose: func(c *remoting.Conn) {
		ns.OnConnClose(c)
		closed <- struct{}{}
	}}, ns.Handler())
	observer := dial(t, addr)
	other := dial(t, addr)
	register(t, other, Registration{Cluster: "C", BrokerName: "b", BrokerAddr: "h2:1", Topics: topics("T")})

	first := dial(t, addr)
	register(t, first, Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:1", Topics: topics("T")})
	// The broker reconnects and registers again; the old connection's
	// close must not remove it.
	second := dial(t, addr)
	register(t, second, Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:1", Topics: topics("T")})
	first.Close()
	<-closed
	if _, body := routeOf(t, observer, "T"); !strings.Contains(body, `"brokerName":"a"`) {
		t.Fatalf("stale connection's close removed a: %s", body)
	}
	second.Close()
	<-closed
	_, body := routeOf(t, observer, "T")
	if strings.Contains(body, `"brokerName":"a"`) || !strings.Contains(body, `"brokerName":"b"`) {
		t.Fatalf("after a's connection closed: %s", body)
	}
}

func TestUnregisterBroker(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	master := Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:1", Topics: topics("T")}
	slave := Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:2", BrokerID: 1}
	register(t, cl, master)
	register(t, cl, slave)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := UnregisterBroker(ctx, cl, master); err != nil {
		t.Fatal(err)
	}
	// The slave keeps the name, and so the queue data, alive.
	_, body := routeOf(t, cl, "T")
	if !strings.Contains(body, `"brokerAddrs":{"1":"h1:2"}`) {
		t.Fatalf("after master unregistered: %s", body)
	}
	if err := UnregisterBroker(ctx, cl, slave); err != nil {
		t.Fatal(err)
	}
	if resp, _ := routeOf(t, cl, "T"); resp.Code != remoting.ResTopicNotExist {
		t.Fatalf("after all unregistered: %v", resp)
	}
}

func clusterInfoOf(t *testing.T, cl *remoting.Client) clusterInfo {
	t.Helper()
	resp := call(t, cl, remoting.ReqGetBrokerClusterInfo, nil, nil)
	if resp.Code != remoting.ResSuccess {
		t.Fatal(resp)
	}
	var ci clusterInfo
	if err := json.Unmarshal(resp.Body, &ci); err != nil {
		t.Fatalf("%s: %v", resp.Body, err)
	}
	return ci
}

func TestClusterInfoTopicListDelete(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	register(t, cl, Registration{Cluster: "C1", BrokerName: "a", BrokerAddr: "h1:1", Topics: topics("T", "U")})
	register(t, cl, Registration{Cluster: "C2", BrokerName: "b", BrokerAddr: "h2:1", Topics: topics("T")})

	resp := call(t, cl, remoting.ReqGetBrokerClusterInfo, nil, nil)
	if !strings.Contains(string(resp.Body), `"brokerAddrTable":{"a":{"brokerAddrs":{"0":"h1:1"},"brokerName":"a","cluster":"C1"`) ||
		!strings.Contains(string(resp.Body), `"clusterAddrTable":{"C1":["a"],"C2":["b"]}`) {
		t.Fatalf("cluster info %s", resp.Body)
	}
	resp = call(t, cl, remoting.ReqGetAllTopicListFromNameServer, nil, nil)
	if string(resp.Body) != `{"topicList":["T","U"]}` {
		t.Fatalf("topic list %s", resp.Body)
	}
	// Delete T only in cluster C2, then U everywhere.
	if resp := call(t, cl, remoting.ReqDeleteTopicInNamesrv, map[string]string{"topic": "T", "clusterName": "C2"}, nil); resp.Code != 0 {
		t.Fatal(resp)
	}
	if _, body := routeOf(t, cl, "T"); strings.Contains(body, `"b"`) || !strings.Contains(body, `"brokerName":"a"`) {
		t.Fatalf("after cluster delete: %s", body)
	}
	if resp := call(t, cl, remoting.ReqDeleteTopicInNamesrv, map[string]string{"topic": "U"}, nil); resp.Code != 0 {
		t.Fatal(resp)
	}
	resp = call(t, cl, remoting.ReqGetAllTopicListFromNameServer, nil, nil)
	if string(resp.Body) != `{"topicList":["T"]}` {
		t.Fatalf("topic list after delete %s", resp.Body)
	}
}

// TestDeleteTopicOfOneGroup: a delete naming a brokerName removes only that
// group's queues of the topic; the topic goes with its last group.
func TestDeleteTopicOfOneGroup(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	register(t, cl, Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h1:1", Topics: topics("T")})
	register(t, cl, Registration{Cluster: "C", BrokerName: "b", BrokerAddr: "h2:1", Topics: topics("T")})
	if resp := call(t, cl, remoting.ReqDeleteTopicInNamesrv, map[string]string{"topic": "T", "brokerName": "b"}, nil); resp.Code != 0 {
		t.Fatal(resp)
	}
	if _, body := routeOf(t, cl, "T"); strings.Contains(body, `"brokerName":"b"`) || !strings.Contains(body, `"brokerName":"a"`) {
		t.Fatalf("after deleting group b's queues: %s", body)
	}
	if resp := call(t, cl, remoting.ReqDeleteTopicInNamesrv, map[string]string{"topic": "T", "brokerName": "a"}, nil); resp.Code != 0 {
		t.Fatal(resp)
	}
	resp := call(t, cl, remoting.ReqGetAllTopicListFromNameServer, nil, nil)
	if strings.Contains(string(resp.Body), `"T"`) {
		t.Fatalf("topic list after deleting the last group's queues %s", resp.Body)
	}
}

func TestBadRequests(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	body, _ := encodeRegisterBody(topics("T"), time.Now())
	good := map[string]string{"clusterName": "C", "brokerName": "a", "brokerAddr": "h:1", "brokerId": "0"}
	with := func(k, v string) map[string]string {
		m := make(map[string]string)
		for kk, vv := range good {
			m[kk] = vv
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name string
		ext  map[string]string
		body []byte
	}{
		{"no cluster", with("clusterName", ""), body},
		{"no addr", with("brokerAddr", ""), body},
		{"bad id", with("brokerId", "x"), body},
		{"negative id", with("brokerId", "-1"), body},
		{"compressed", with("compressed", "true"), body},
		{"crc mismatch", with("bodyCrc32", fmt.Sprint(bodyCRC(body)+1)), body},
		{"bad json", good, []byte(`{"topicConfigSerializeWrapper":`)},
		{"bad perm", good, []byte(`{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":99}}}}`)},
		{"negative queues", good, []byte(`{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"readQueueNums":-1}}}}`)},
	}
	for _, tc := range cases {
		if resp := call(t, cl, remoting.ReqRegisterBroker, tc.ext, tc.body); resp.Code != remoting.ResSystemError {
			t.Errorf("%s: %v", tc.name, resp)
		}
	}
	if resp := call(t, cl, remoting.ReqGetBrokerClusterInfo, nil, nil); string(resp.Body) != `{"brokerAddrTable":{},"clusterAddrTable":{}}` {
		t.Fatalf("bad registrations changed state: %s", resp.Body)
	}
	if resp := call(t, cl, remoting.ReqRegisterBroker, with("bodyCrc32", fmt.Sprint(bodyCRC(body))), body); resp.Code != 0 {
		t.Fatalf("good crc: %v", resp)
	}
	if resp := call(t, cl, remoting.ReqSendMessage, nil, nil); resp.Code != remoting.ResRequestCodeNotSupported ||
		resp.Remark != "request type 10 not supported" {
		t.Fatalf("unknown code: %v", resp)
	}
	if resp := call(t, cl, remoting.ReqDeleteTopicInNamesrv, nil, nil); resp.Code != remoting.ResSystemError {
		t.Fatalf("delete without topic: %v", resp)
	}
	if resp := call(t, cl, remoting.ReqUnregisterBroker, nil, nil); resp.Code != remoting.ResSystemError {
		t.Fatalf("unregister without fields: %v", resp)
	}
}

func TestRegisterBrokerReportsError(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	err := RegisterBroker(ctx, cl, Registration{BrokerName: "a", BrokerAddr: "h:1"}) // no cluster
	if err == nil || !strings.Contains(err.Error(), "SYSTEM_ERROR") {
		t.Fatalf("got %v", err)
	}
	cl.Close()
	if err := RegisterBroker(ctx, cl, Registration{Cluster: "C", BrokerName: "a", BrokerAddr: "h:1"}); !errors.Is(err, remoting.ErrClosed) {
		t.Fatalf("closed client: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}
