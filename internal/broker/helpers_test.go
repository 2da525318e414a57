package broker

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// fakeClock is a settable clock for expiry tests.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// env is a broker on a real store behind a real remoting server on
// 127.0.0.1:0.
type env struct {
	t    testing.TB
	dir  string
	fs   vfs.FS
	cfg  Config
	st   *store.Store
	b    *Broker
	srv  *remoting.Server
	addr string
	stop context.CancelFunc
	done chan struct{}
	// flush is the store's flushDiskType (startEnvFlush; default ASYNC).
	flush store.FlushDiskType
	// syncFlushTimeout, if > 0, is the store's SyncFlushTimeout.
	syncFlushTimeout time.Duration
	// storeMutate, if set, changes the store configuration before Open.
	storeMutate func(*store.Config)
	// storeFailed: the test failed the store on purpose, so its Close
	// reports an error.
	storeFailed bool
	// sharedCore: the broker is built with NewOnCore on core, which the
	// env owns (as cmd/keel does), instead of with a core of its own.
	sharedCore bool
	core       *core.Broker
}

// startEnv starts a broker; mutate adjusts the config before New.
func startEnv(t testing.TB, mutate func(*Config)) *env {
	t.Helper()
	return startEnvFlush(t, store.AsyncFlush, mutate)
}

// startEnvFlush starts a broker on a store with the given flushDiskType.
// Under SYNC_FLUSH send responses are deferred until the group commit
// (sendCall.put); under ASYNC_FLUSH they are made on the handler's
// goroutine.
func startEnvFlush(t testing.TB, flush store.FlushDiskType, mutate func(*Config)) *env {
	t.Helper()
	e := &env{t: t, dir: t.TempDir(), fs: vfs.OS{}, flush: flush}
	e.cfg = DefaultConfig()
	e.cfg.DataDir = e.dir
	if mutate != nil {
		mutate(&e.cfg)
	}
	e.start()
	t.Cleanup(e.shutdown)
	return e
}

func (e *env) start() {
	t := e.t
	t.Helper()
	scfg := store.DefaultConfig(e.dir)
	scfg.FS = e.fs
	scfg.FlushDiskType = e.flush
	if e.syncFlushTimeout > 0 {
		scfg.SyncFlushTimeout = e.syncFlushTimeout
	}
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.ConsumeQueueSegmentEntries = 1000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 1000, 4000
	if e.storeMutate != nil {
		e.storeMutate(&scfg)
	}
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.FS = e.fs
	if cfg.AdvertisedAddr == DefaultConfig().AdvertisedAddr {
		cfg.AdvertisedAddr = ln.Addr().String()
	}
	b, err := e.newBroker(cfg, st)
	if err != nil {
		st.Close()
		ln.Close()
		t.Fatalf("broker.New: %v", err)
	}
	srv := remoting.NewServer(remoting.ServerConfig{OnConnClose: b.OnConnClose}, b.Handler())
	go srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	e.st, e.b, e.srv, e.addr, e.stop, e.done = st, b, srv, ln.Addr().String(), cancel, done
}

// shutdown stops the server, the broker and the store (idempotent).
func (e *env) shutdown() {
	if e.b == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e.srv.Shutdown(ctx)
	if err := e.b.Close(); err != nil {
		e.t.Errorf("broker.Close: %v", err)
	}
	e.stop()
	<-e.done
	if e.core != nil {
		e.core.Close()
		if err := e.core.FlushOffsets(); err != nil {
			e.t.Errorf("core.FlushOffsets: %v", err)
		}
		e.core = nil
	}
	if err := e.st.Close(); err != nil && !e.storeFailed {
		e.t.Errorf("store.Close: %v", err)
	}
	e.b = nil
}

// newBroker builds the broker on st: with a core of its own, or on a core
// the env owns (sharedCore).
func (e *env) newBroker(cfg Config, st *store.Store) (*Broker, error) {
	if !e.sharedCore {
		return New(cfg, st, nil)
	}
	cc, err := CoreConfig(cfg)
	if err != nil {
		return nil, err
	}
	if e.core, err = core.New(cc, st, nil); err != nil {
		return nil, err
	}
	return NewOnCore(cfg, e.core, nil)
}

// restart closes everything and starts again on the same data directory.
func (e *env) restart() {
	e.shutdown()
	e.start()
}

// client is a remoting client to the broker that records server requests.
type client struct {
	t  testing.TB
	c  *remoting.Client
	mu sync.Mutex
	in []*remoting.Command // requests the broker sent us
}

func (e *env) dial() *client {
	e.t.Helper()
	cl := &client{t: e.t}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	h := remoting.HandlerFunc(func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
		cl.mu.Lock()
		cl.in = append(cl.in, req)
		cl.mu.Unlock()
		return nil
	})
	c, err := remoting.Dial(ctx, e.addr, remoting.ClientConfig{Handler: h})
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	cl.c = c
	e.t.Cleanup(func() { c.Close() })
	return cl
}

func (cl *client) invoke(code int16, ext map[string]string, body []byte) *remoting.Command {
	cl.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.c.Invoke(ctx, remoting.NewRequest(code, ext, body))
	if err != nil {
		cl.t.Fatalf("invoke %d: %v", code, err)
	}
	return resp
}

// received returns the codes of requests the broker sent to this client.
func (cl *client) received() []int16 {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	out := make([]int16, len(cl.in))
	for i, r := range cl.in {
		out[i] = r.Code
	}
	return out
}

func (cl *client) countReceived(code int16) int {
	n := 0
	for _, c := range cl.received() {
		if c == code {
			n++
		}
	}
	return n
}

// flushTypes runs fn as a subtest under each flushDiskType: the send path
// answers on the handler's goroutine under ASYNC_FLUSH and from the
// store's acknowledger under SYNC_FLUSH.
func flushTypes(t *testing.T, fn func(t *testing.T, flush store.FlushDiskType)) {
	for _, f := range []store.FlushDiskType{store.AsyncFlush, store.SyncFlush} {
		t.Run(f.String(), func(t *testing.T) { fn(t, f) })
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantCode(t *testing.T, resp *remoting.Command, code int16) {
	t.Helper()
	if resp.Code != code {
		t.Fatalf("response code %d (%q), want %d", resp.Code, resp.Remark, code)
	}
}

// sendV1 sends one message with the V1 header (the Go client's format).
func (cl *client) sendV1(topic string, queueID int32, props string, body []byte) *remoting.Command {
	return cl.invoke(remoting.ReqSendMessage, map[string]string{
		"producerGroup": "pg", "topic": topic, "defaultTopic": DefaultTopic, "defaultTopicQueueNums": "4",
		"queueId": itoa(queueID), "sysFlag": "0", "bornTimestamp": "1700000000000", "flag": "0",
		"properties": props, "reconsumeTimes": "0", "unitMode": "false", "maxReconsumeTimes": "0", "batch": "false",
	}, body)
}

// heartbeat registers clientID as a consumer of group subscribed to topic.
func (cl *client) heartbeat(clientID, group, topic, expr, model string) *remoting.Command {
	body := `{"clientID":"` + clientID + `","producerDataSet":[],"consumerDataSet":[{"groupName":"` + group +
		`","consumeType":"CONSUME_PASSIVELY","messageModel":"` + model +
		`","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,"topic":"` +
		topic + `","subString":"` + expr + `","tagsSet":[],"codeSet":[],"subVersion":1700000000000000000,"expressionType":"TAG"}],"unitMode":false}]}`
	return cl.invoke(remoting.ReqHeartBeat, nil, []byte(body))
}

func pullExt(group, topic string, queueID int32, offset int64, sysFlag int32, suspendMs int64) map[string]string {
	return map[string]string{
		"consumerGroup": group, "topic": topic, "queueId": itoa(queueID), "queueOffset": itoa(offset),
		"maxMsgNums": "32", "sysFlag": itoa(sysFlag), "commitOffset": "0",
		"suspendTimeoutMillis": itoa(suspendMs), "subscription": "", "subVersion": "0", "expressionType": "TAG",
	}
}

// waitMax waits until the store's dispatcher has made n entries of a queue
// visible (puts are acknowledged before they are dispatched).
func (e *env) waitMax(topic string, queueID int32, n int64) {
	e.t.Helper()
	waitFor(e.t, "dispatch of "+topic, func() bool { return e.st.MaxOffset(topic, queueID) >= n })
}

// storedAt waits until the record at phys is confirmed and returns it
// decoded.
func (e *env) storedAt(phys int64) *message.Message {
	e.t.Helper()
	e.waitConfirmed(phys)
	rec, err := e.st.LookMessageByOffset(phys)
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := message.Decode(rec)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// waitConfirmed waits until the record at phys is below the store's
// confirmed offset (LookMessageByOffset serves only those).
func (e *env) waitConfirmed(phys int64) {
	e.t.Helper()
	waitFor(e.t, "confirmed offset", func() bool { return e.st.VisibleOffset() > phys })
}
