package console

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/metrics"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// cluster is a NameServer and a broker on a real store, in process, with
// the console served over HTTP.
type cluster struct {
	t       *testing.T
	namesrv string
	broker  string
	st      *store.Store
	dir     string // the store's directory
	b       *broker.Broker
	admin   *admin.Client
	console *Console
	http    *httptest.Server
	member  *remoting.Client
	metrics *metrics.Metrics // fed by the broker and the store, as in keel serve
}

func serve(t *testing.T, h remoting.Handler, onClose func(*remoting.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := remoting.NewServer(remoting.ServerConfig{OnConnClose: onClose}, h)
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

func startCluster(t *testing.T, write bool, opts ...func(*broker.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t}
	ns := namesrv.New(namesrv.Config{})
	c.namesrv = serve(t, ns.Handler(), ns.OnConnClose)
	dir := t.TempDir()
	scfg := store.DefaultConfig(dir)
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.ConsumeQueueSegmentEntries = 1000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 1000, 4000
	// Every record read from its file (no read window, which would serve
	// the newest as written): the tests damage records at rest.
	scfg.ReadWindowBytes = -1
	var m atomic.Pointer[metrics.Metrics]
	scfg.OnFlush = func(d time.Duration, n int64) {
		if mm := m.Load(); mm != nil {
			mm.ObserveFlush(d, n)
		}
	}
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	c.st, c.dir = st, dir
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bcfg := broker.DefaultConfig()
	bcfg.DataDir, bcfg.AdvertisedAddr, bcfg.NamesrvAddrs = dir, ln.Addr().String(), []string{c.namesrv}
	bcfg.Version = "v9.8.7-test"
	bcfg.RuntimeInfo = func() map[string]string { return m.Load().RuntimeInfo() }
	for _, o := range opts {
		o(&bcfg)
	}
	if c.b, err = broker.New(bcfg, st, nil); err != nil {
		t.Fatal(err)
	}
	c.metrics = metrics.New(metrics.Config{Sources: metrics.Sources{Broker: c.b, Store: st}})
	m.Store(c.metrics)
	srv := remoting.NewServer(remoting.ServerConfig{OnConnClose: c.b.OnConnClose}, c.b.Handler())
	go srv.Serve(ln)
	c.broker = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.b.Run(ctx) }()
	c.admin = admin.New(admin.Config{NamesrvAddrs: []string{c.namesrv}})
	c.console = New(Config{Admin: c.admin, Write: write, Version: "test", SampleInterval: time.Hour,
		Local: func() LocalStats {
			return LocalStats{DiskTotalBytes: 100 << 30, DiskFreeBytes: 70 << 30, CommitLogBytes: 4096, Writable: true}
		}})
	c.http = httptest.NewServer(c.console.Handler())
	t.Cleanup(func() {
		c.http.Close()
		c.admin.Close()
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		srv.Shutdown(sctx)
		c.b.Close()
		cancel()
		<-done
		st.Close()
	})
	waitFor(t, "the broker to register", func() bool { _, err := c.admin.Masters(context.Background()); return err == nil })
	return c
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rpc sends a request to the broker over the test's consumer connection
// (it stays open: a consumer leaves its group when its connection closes)
// and requires success.
func (c *cluster) rpc(code int16, ext map[string]string, body []byte) *remoting.Command {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c.member == nil {
		cl, err := remoting.Dial(ctx, c.broker, remoting.ClientConfig{})
		if err != nil {
			c.t.Fatal(err)
		}
		c.member = cl
		c.t.Cleanup(func() { cl.Close() })
	}
	resp, err := c.member.Invoke(ctx, remoting.NewRequest(code, ext, body))
	if err != nil || resp.Code != remoting.ResSuccess {
		c.t.Fatalf("%s: %v %+v", remoting.RequestCode(code), err, resp)
	}
	return resp
}

// fixture is the data the console tests look for.
type fixture struct {
	topic, group, key string
	sent              []admin.SendResult
	deadID            string // unique key of the dead letter
}

// seed creates a topic with messages, a consumer group that is behind (lag
// 3 of 4) with a member online, and one dead letter.
func (c *cluster) seed() fixture {
	c.t.Helper()
	ctx := context.Background()
	f := fixture{topic: "Orders", group: "billing", key: "order-42"}
	if err := c.admin.CreateTopic(ctx, admin.TopicSpec{Topic: f.topic, ReadQueues: 2, WriteQueues: 2, Perm: admin.PermRW}); err != nil {
		c.t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		keys := []string{"order-" + strconv.Itoa(40+i)}
		body := `{"order":` + strconv.Itoa(40+i) + `,"amount":"19.90"}`
		r, err := c.admin.Send(ctx, admin.SendSpec{Topic: f.topic, Tags: "created", Keys: keys, Body: []byte(body), QueueID: 0})
		if err != nil {
			c.t.Fatal(err)
		}
		f.sent = append(f.sent, r)
	}
	hb := `{"clientID":"10.0.0.7@billing-1","producerDataSet":[],"consumerDataSet":[{"groupName":"billing","consumeType":"CONSUME_PASSIVELY",` +
		`"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"topic":"Orders",` +
		`"subString":"created","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}`
	c.rpc(remoting.ReqHeartBeat, nil, []byte(hb))
	c.rpc(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": f.group, "topic": f.topic, "queueId": "0", "commitOffset": "1"}, nil)
	waitFor(c.t, "dispatch", func() bool { return c.st.MaxOffset(f.topic, 0) == 4 })
	// Message 2 failed with no retries left.
	_, phys, err := message.ParseOffsetMsgID(f.sent[2].OffsetMsgID)
	if err != nil {
		c.t.Fatal(err)
	}
	waitFor(c.t, "confirmed offset", func() bool { return c.st.VisibleOffset() > phys })
	c.rpc(remoting.ReqConsumerSendMsgBack, map[string]string{"group": f.group, "offset": strconv.FormatInt(phys, 10),
		"delayLevel": "0", "maxReconsumeTimes": "0"}, nil)
	f.deadID = f.sent[2].MsgID
	waitFor(c.t, "the dead letter", func() bool { return c.st.MaxOffset(broker.DLQTopic(f.group), 0) == 1 })
	waitFor(c.t, "the key index", func() bool {
		ms, err := c.admin.QueryByKey(ctx, f.topic, f.key, time.Time{}, time.Time{}, 0)
		return err == nil && len(ms) == 1
	})
	c.console.SampleOnce(ctx)
	return f
}

func (c *cluster) get(path string) (*http.Response, error) { return http.Get(c.http.URL + path) }
