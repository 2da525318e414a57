package remoting

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitTimeout bounds every wait in these tests; they never sleep.
const waitTimeout = 10 * time.Second

func startServer(t testing.TB, cfg ServerConfig, h Handler) (*Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(cfg, h)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("serve returned %v", err)
		}
	})
	return srv, ln.Addr().String()
}

func dialClient(t testing.TB, addr string, cfg ClientConfig) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cl, err := Dial(ctx, addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

func invoke(t *testing.T, cl *Client, req *Command) *Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// echo answers every request with SUCCESS, the request's ext and body.
var echo = HandlerFunc(func(_ context.Context, _ *Conn, req *Command) *Command {
	resp := req.NewResponse(ResSuccess, "")
	resp.ExtFields = req.ExtFields
	resp.Body = req.Body
	return resp
})

func TestInvokeEchoBothSerializeTypes(t *testing.T) {
	_, addr := startServer(t, ServerConfig{}, echo)
	cl := dialClient(t, addr, ClientConfig{})
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, st := range []byte{SerializeJSON, SerializeRocketMQ} {
		req := NewRequest(ReqSendMessage, map[string]string{"topic": "T", "n": "1"}, big)
		req.SerializeType = st
		resp := invoke(t, cl, req)
		if resp.Code != ResSuccess || !resp.IsResponse() || resp.Opaque != req.Opaque ||
			resp.SerializeType != st || resp.Ext("topic") != "T" || !bytes.Equal(resp.Body, big) {
			t.Fatalf("type %d: response %v", st, resp)
		}
		if resp.Version != Version || resp.Language != LanguageJava {
			t.Fatalf("response version %d language %q", resp.Version, resp.Language)
		}
	}
}

func TestConcurrentInvokesOneConnection(t *testing.T) {
	var running, maxRunning atomic.Int32
	h := HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := maxRunning.Load()
			if n <= m || maxRunning.CompareAndSwap(m, n) {
				break
			}
		}
		return echo(ctx, c, req)
	})
	const inflight = 8
	_, addr := startServer(t, ServerConfig{MaxInflightPerConn: inflight}, h)
	cl := dialClient(t, addr, ClientConfig{})
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			want := strconv.Itoa(i)
			resp, err := cl.Invoke(ctx, NewRequest(ReqHeartBeat, map[string]string{"i": want}, []byte(want)))
			switch {
			case err != nil:
				errs <- err
			case resp.Ext("i") != want || string(resp.Body) != want:
				errs <- fmt.Errorf("request %s got response %v", want, resp)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if m := maxRunning.Load(); m > inflight {
		t.Fatalf("%d handlers ran at once, bound is %d", m, inflight)
	}
}

// TestCancelledInvokesDoNotCrossResponses: Invoke reuses its response
// channels; one abandoned while its response was being delivered must not
// hand that response to a later request. Half of the requests are cancelled
// while in flight; every answered one must get its own response.
func TestCancelledInvokesDoNotCrossResponses(t *testing.T) {
	_, addr := startServer(t, ServerConfig{}, echo)
	cl := dialClient(t, addr, ClientConfig{})
	const senders, perSender = 16, 300
	var wg sync.WaitGroup
	var answered atomic.Int64
	errs := make(chan error, senders)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perSender {
				want := fmt.Sprintf("%d-%d", s, i)
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				if i%2 == 1 {
					go cancel() // races with the response
				}
				resp, err := cl.Invoke(ctx, NewRequest(ReqHeartBeat, map[string]string{"i": want}, nil))
				cancel()
				switch {
				case errors.Is(err, context.Canceled):
				case err != nil:
					errs <- err
					return
				case resp.Ext("i") != want:
					errs <- fmt.Errorf("request %s got the response to %s", want, resp.Ext("i"))
					return
				default:
					answered.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if answered.Load() < senders*perSender/2 {
		t.Fatalf("only %d of the %d uncancelled requests were answered", answered.Load(), senders*perSender/2)
	}
}

func TestHandlerPanicAndMissingHandler(t *testing.T) {
	h := HandlerFunc(func(context.Context, *Conn, *Command) *Command { panic("boom") })
	_, addr := startServer(t, ServerConfig{}, h)
	cl := dialClient(t, addr, ClientConfig{})
	if resp := invoke(t, cl, NewRequest(ReqPullMessage, nil, nil)); resp.Code != ResSystemError {
		t.Fatalf("panic: %v", resp)
	}
	// The connection survives the panic.
	if resp := invoke(t, cl, NewRequest(ReqPullMessage, nil, nil)); resp.Code != ResSystemError {
		t.Fatalf("second: %v", resp)
	}
}

func TestInvokeTimeoutThenDeferredResponse(t *testing.T) {
	held := make(chan *Command, 1)
	var srvConn atomic.Pointer[Conn]
	h := HandlerFunc(func(_ context.Context, c *Conn, req *Command) *Command {
		srvConn.Store(c)
		held <- req
		return nil // answered later
	})
	_, addr := startServer(t, ServerConfig{}, h)
	cl := dialClient(t, addr, ClientConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Invoke(ctx, NewRequest(ReqPullMessage, nil, nil))
		errc <- err
	}()
	first := <-held
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("invoke: %v", err)
	}
	// A late response to the abandoned request is dropped; a deferred
	// response to a live one arrives.
	if err := srvConn.Load().WriteResponse(first.NewResponse(ResSuccess, "late")); err != nil {
		t.Fatal(err)
	}
	go func() {
		req := <-held
		srvConn.Load().WriteResponse(req.NewResponse(ResPullNotFound, "deferred"))
	}()
	if resp := invoke(t, cl, NewRequest(ReqPullMessage, nil, nil)); resp.Code != ResPullNotFound || resp.Remark != "deferred" {
		t.Fatalf("deferred: %v", resp)
	}
}

// rawConn is a hand-driven TCP peer.
type rawConn struct {
	t  *testing.T
	nc net.Conn
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(waitTimeout))
	return &rawConn{t: t, nc: nc}
}

func (r *rawConn) write(b []byte) {
	r.t.Helper()
	if _, err := r.nc.Write(b); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rawConn) send(c *Command) {
	r.t.Helper()
	f, err := EncodeFrame(nil, c)
	if err != nil {
		r.t.Fatal(err)
	}
	r.write(f)
}

func (r *rawConn) read() *Command {
	r.t.Helper()
	p, err := readPayload(r.nc, DefaultMaxFrameBytes)
	if err != nil {
		r.t.Fatal(err)
	}
	c, err := decodePayload(p)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// expectClosed reads until the server closes the connection; no frame may
// arrive first.
func (r *rawConn) expectClosed() {
	r.t.Helper()
	var one [1]byte
	n, err := r.nc.Read(one[:])
	if n != 0 || !(errors.Is(err, io.EOF) || isReset(err)) {
		r.t.Fatalf("expected close, read %d bytes, err %v", n, err)
	}
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}

func TestOnewayGetsNoResponse(t *testing.T) {
	srv, addr := startServer(t, ServerConfig{}, echo)
	r := dialRaw(t, addr)
	oneway := NewRequest(ReqUpdateConsumerOffset, nil, nil)
	oneway.Opaque, oneway.Flag = 1, FlagOneway
	r.send(oneway)
	req := NewRequest(ReqUpdateConsumerOffset, nil, nil) // the Go client's "oneway": no flag
	req.Opaque = 2
	r.send(req)
	if resp := r.read(); resp.Opaque != 2 {
		t.Fatalf("response to opaque %d", resp.Opaque)
	}
	// Shutdown flushes every response of finished handlers: none may
	// belong to the oneway request.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	r.expectClosed()
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestOversizedFrameClosesOnlyThatConnection(t *testing.T) {
	var closed atomic.Int32
	var logs syncBuffer
	_, addr := startServer(t, ServerConfig{OnConnClose: func(*Conn) { closed.Add(1) },
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, echo)
	good := dialClient(t, addr, ClientConfig{})
	invoke(t, good, NewRequest(ReqHeartBeat, nil, nil))

	bad := dialRaw(t, addr)
	bad.write(binary.BigEndian.AppendUint32(nil, DefaultMaxFrameBytes+1))
	bad.expectClosed()

	if resp := invoke(t, good, NewRequest(ReqHeartBeat, nil, nil)); resp.Code != ResSuccess {
		t.Fatalf("after oversized frame: %v", resp)
	}
	// A new connection is served too.
	if resp := invoke(t, dialClient(t, addr, ClientConfig{}), NewRequest(ReqHeartBeat, nil, nil)); resp.Code != ResSuccess {
		t.Fatal(resp)
	}
	waitFor(t, func() bool { return closed.Load() == 1 })
	if !strings.Contains(logs.String(), "frame too large: length 16777217 exceeds the limit of 16777216 bytes") {
		t.Fatalf("log does not explain the close:\n%s", logs.String())
	}
}

func TestClientRefusesToSendOversizedFrame(t *testing.T) {
	_, addr := startServer(t, ServerConfig{}, echo)
	cl := dialClient(t, addr, ClientConfig{MaxFrameBytes: 1024})
	_, err := cl.Invoke(context.Background(), NewRequest(ReqSendMessage, nil, make([]byte, 2000)))
	if !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("got %v", err)
	}
	invoke(t, cl, NewRequest(ReqSendMessage, nil, make([]byte, 100)))
}

func TestBadHeaderClosesConnection(t *testing.T) {
	_, addr := startServer(t, ServerConfig{}, echo)
	r := dialRaw(t, addr)
	r.write(frameBytes(0, []byte(`{"code":"x"}`), nil))
	r.expectClosed()
}

func TestStalledHalfFrameClosedByIdleTimeout(t *testing.T) {
	closed := make(chan *Conn, 1)
	_, addr := startServer(t, ServerConfig{IdleTimeout: 100 * time.Millisecond,
		OnConnClose: func(c *Conn) { closed <- c }}, echo)
	r := dialRaw(t, addr)
	f, _ := EncodeFrame(nil, NewRequest(ReqHeartBeat, nil, []byte("body")))
	r.write(f[:len(f)/2])
	r.expectClosed()
	select {
	case c := <-closed:
		if !errors.Is(c.Err(), ErrIdleTimeout) {
			t.Fatalf("closed with %v", c.Err())
		}
	case <-time.After(waitTimeout):
		t.Fatal("OnConnClose not called")
	}
}

func TestShutdownDrainsInflight(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	h := HandlerFunc(func(_ context.Context, _ *Conn, req *Command) *Command {
		close(entered)
		<-release
		return req.NewResponse(ResSuccess, "drained")
	})
	srv, addr := startServer(t, ServerConfig{}, h)
	cl := dialClient(t, addr, ClientConfig{})
	refused := func() { // new connections are refused once shutdown has begun
		if nc, err := net.Dial("tcp", addr); err == nil {
			nc.SetDeadline(time.Now().Add(waitTimeout))
			var b [1]byte
			if _, err := nc.Read(b[:]); err == nil {
				t.Fatal("new connection served during shutdown")
			}
			nc.Close()
		}
	}
	err := shutdownWaitsForHeld(t, srv, cl, NewRequest(ReqSendMessage, nil, nil),
		func() { <-entered }, refused, func() { close(release) }, "drained")
	if err != nil {
		t.Fatal(err)
	}
	<-cl.Done()
}

func TestShutdownDeadlineClosesStuckConnections(t *testing.T) {
	entered := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, _ *Conn, req *Command) *Command {
		close(entered)
		<-ctx.Done() // a handler that only stops when its connection closes
		return nil
	})
	srv, addr := startServer(t, ServerConfig{}, h)
	cl := dialClient(t, addr, ClientConfig{})
	go cl.Invoke(context.Background(), NewRequest(ReqPullMessage, nil, nil))
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("shutdown: %v", err)
	}
	<-cl.Done()
}

func TestServerToClientRequests(t *testing.T) {
	srv, addr := startServer(t, ServerConfig{}, echo)
	onewayGot := make(chan *Command, 1)
	clientHandler := HandlerFunc(func(_ context.Context, _ *Conn, req *Command) *Command {
		if req.IsOneway() {
			onewayGot <- req
			return nil
		}
		resp := req.NewResponse(ResSuccess, "client says hi")
		resp.SetExt("group", req.Ext("consumerGroup"))
		return resp
	})
	cl := dialClient(t, addr, ClientConfig{Handler: clientHandler})
	invoke(t, cl, NewRequest(ReqHeartBeat, nil, nil))
	conns := srv.Conns()
	if len(conns) != 1 {
		t.Fatalf("%d server connections", len(conns))
	}
	sc := conns[0]
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := sc.Invoke(ctx, NewRequest(ReqGetConsumerRunningInfo, map[string]string{"consumerGroup": "g"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Remark != "client says hi" || resp.Ext("group") != "g" {
		t.Fatalf("client response %v", resp)
	}
	if err := sc.InvokeOneway(NewRequest(ReqNotifyConsumerIDsChanged, map[string]string{"consumerGroup": "g"}, nil)); err != nil {
		t.Fatal(err)
	}
	if req := <-onewayGot; req.Flag != FlagOneway || req.Ext("consumerGroup") != "g" {
		t.Fatalf("oneway request %v", req)
	}
	// A client without a handler answers REQUEST_CODE_NOT_SUPPORTED.
	plain := dialClient(t, addr, ClientConfig{})
	invoke(t, plain, NewRequest(ReqHeartBeat, nil, nil))
	for _, c := range srv.Conns() {
		if c == sc {
			continue
		}
		resp, err := c.Invoke(ctx, NewRequest(ReqCheckTransactionState, nil, nil))
		if err != nil || resp.Code != ResRequestCodeNotSupported {
			t.Fatalf("no handler: %v %v", resp, err)
		}
	}
}

// holdUntilClosed is a handler that reports each request's connection on
// entered and answers nothing until the connection closes.
func holdUntilClosed(entered chan<- *Conn) Handler {
	return HandlerFunc(func(ctx context.Context, c *Conn, _ *Command) *Command {
		entered <- c
		<-ctx.Done()
		return nil
	})
}

func TestInvokeFailsWhenConnectionCloses(t *testing.T) {
	entered := make(chan *Conn, 1)
	_, addr := startServer(t, ServerConfig{}, holdUntilClosed(entered))
	cl := dialClient(t, addr, ClientConfig{})
	errc := make(chan error, 1)
	go func() {
		_, err := cl.Invoke(context.Background(), NewRequest(ReqPullMessage, nil, nil))
		errc <- err
	}()
	(<-entered).Close()
	if err := <-errc; err == nil {
		t.Fatal("invoke succeeded on a closed connection")
	}
	if _, err := cl.Invoke(context.Background(), NewRequest(ReqPullMessage, nil, nil)); err == nil {
		t.Fatal("invoke after close succeeded")
	}
}

// waitFor polls cond until it holds or waitTimeout passes.
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

// shutdownWaitsForHeld sends req and, once held has reported it in
// flight, begins a graceful Shutdown; during runs while it is under way.
// Shutdown must not return before release lets the request finish, and
// the response, carrying remark, must reach the client. It returns
// Shutdown's result.
func shutdownWaitsForHeld(t *testing.T, srv *Server, cl *Client, req *Command, held func(), during func(), release func(), remark string) error {
	t.Helper()
	got := make(chan *Command, 1)
	go func() {
		resp, err := cl.Invoke(context.Background(), req)
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	held()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	waitFor(t, func() bool { return srv.isClosing() })
	if during != nil {
		during()
	}
	select {
	case err := <-shut:
		t.Fatalf("shutdown returned %v before the held request finished", err)
	default:
	}
	release()
	if resp := <-got; resp == nil || resp.Remark != remark {
		t.Fatalf("in-flight response %v", resp)
	}
	return <-shut
}

// TestWorkerReuseKeepsDrainAccounting: request goroutines are reused, a
// request run by a reused worker is in flight like any other (Shutdown
// waits for it and flushes its response), and parked workers leave when
// their connection closes.
func TestWorkerReuseKeepsDrainAccounting(t *testing.T) {
	entered := make(chan struct{})
	release := make(chan struct{})
	h := HandlerFunc(func(_ context.Context, _ *Conn, req *Command) *Command {
		if req.Ext("hold") != "" {
			close(entered)
			<-release
		}
		return req.NewResponse(ResSuccess, "done")
	})
	srv, addr := startServer(t, ServerConfig{}, h)
	cl := dialClient(t, addr, ClientConfig{})
	// One request at a time: each finds the previous one's worker parked
	// (unless the reader wins the race with a worker about to park; then
	// one more worker is made and parks too).
	const requests = 200
	created := goroutinesCreated()
	for range requests {
		invoke(t, cl, NewRequest(ReqSendMessage, nil, nil))
	}
	if n := goroutinesCreated() - created; n >= requests/2 {
		t.Fatalf("%d goroutines created for %d requests: workers are not reused", n, requests)
	}
	conns := srv.Conns()
	if len(conns) != 1 {
		t.Fatalf("%d connections", len(conns))
	}
	sc := conns[0]
	waitFor(t, func() bool { return sc.parked.Load() > 0 })
	err := shutdownWaitsForHeld(t, srv, cl, NewRequest(ReqSendMessage, map[string]string{"hold": "1"}, nil),
		func() { <-entered }, nil, func() { close(release) }, "done")
	if err != nil {
		t.Fatal(err)
	}
	<-sc.Done()
	waitFor(t, func() bool { return sc.parked.Load() == 0 })
}
