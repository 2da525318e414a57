package remoting

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// asyncResult is what one InvokeAsync's done received.
type asyncResult struct {
	resp *Command
	err  error
}

// nextResult waits for a done call's result, failing after waitTimeout.
func nextResult(t *testing.T, got <-chan asyncResult) asyncResult {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("done was not called")
		return asyncResult{}
	}
}

// TestInvokeAsyncEachGetsItsOwnResponse: many requests in flight on one
// connection from one goroutine; every done is called once, with the
// response to its own request, and every OnWritten once.
func TestInvokeAsyncEachGetsItsOwnResponse(t *testing.T) {
	_, addr := startServer(t, ServerConfig{MaxInflightPerConn: 64}, echo)
	cl := dialClient(t, addr, ClientConfig{})
	const n = 2000
	var calls, written [n]atomic.Int32
	results := make(chan error, n)
	for i := range n {
		want := strconv.Itoa(i)
		req := NewRequest(ReqHeartBeat, map[string]string{"i": want}, []byte(want))
		req.OnWritten = func() { written[i].Add(1) }
		err := cl.InvokeAsync(req, waitTimeout, func(resp *Command, err error) {
			calls[i].Add(1)
			switch {
			case err != nil:
				results <- err
			case resp.Ext("i") != want || string(resp.Body) != want:
				results <- fmt.Errorf("request %s got response %v", want, resp)
			default:
				results <- nil
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		select {
		case err := <-results:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("not every done was called")
		}
	}
	waitFor(t, func() bool {
		for i := range written {
			if written[i].Load() != 1 {
				return false
			}
		}
		return true
	})
	for i := range n {
		if c := calls[i].Load(); c != 1 {
			t.Fatalf("request %d: done called %d times", i, c)
		}
	}
}

// TestInvokeAsyncTimeoutThenLateResponse: a request without an answer
// fails with context.DeadlineExceeded once its timeout passes; the late
// response is dropped (done is not called again) and the connection
// still serves other requests.
func TestInvokeAsyncTimeoutThenLateResponse(t *testing.T) {
	held := make(chan *Command, 1)
	var srvConn atomic.Pointer[Conn]
	h := HandlerFunc(func(ctx context.Context, c *Conn, req *Command) *Command {
		if req.Code == ReqPullMessage {
			srvConn.Store(c)
			held <- req
			return nil // answered later, by hand
		}
		return echo(ctx, c, req)
	})
	_, addr := startServer(t, ServerConfig{}, h)
	cl := dialClient(t, addr, ClientConfig{})
	var calls atomic.Int32
	got := make(chan asyncResult, 2)
	const timeout = 50 * time.Millisecond
	start := time.Now()
	if err := cl.InvokeAsync(NewRequest(ReqPullMessage, nil, nil), timeout, func(resp *Command, err error) {
		calls.Add(1)
		got <- asyncResult{resp, err}
	}); err != nil {
		t.Fatal(err)
	}
	first := <-held
	r := nextResult(t, got)
	if !errors.Is(r.err, context.DeadlineExceeded) || r.resp != nil {
		t.Fatalf("expired request: response %v, err %v", r.resp, r.err)
	}
	if waited := time.Since(start); waited < timeout {
		t.Fatalf("failed after %v, before its timeout %v", waited, timeout)
	}
	if err := srvConn.Load().WriteResponse(first.NewResponse(ResSuccess, "late")); err != nil {
		t.Fatal(err)
	}
	// A later request on the same connection is answered after the late
	// response was read: done of the expired one must not run again.
	if resp := invoke(t, cl, NewRequest(ReqHeartBeat, map[string]string{"i": "x"}, nil)); resp.Ext("i") != "x" {
		t.Fatalf("next request: %v", resp)
	}
	if c := calls.Load(); c != 1 {
		t.Fatalf("done called %d times", c)
	}
}

// TestInvokeAsyncFailsWhenConnectionCloses: requests waiting when the
// connection closes get an error; after the close InvokeAsync returns an
// error, never calls done, and still runs OnWritten.
func TestInvokeAsyncFailsWhenConnectionCloses(t *testing.T) {
	entered := make(chan *Conn, 8)
	_, addr := startServer(t, ServerConfig{}, holdUntilClosed(entered))
	cl := dialClient(t, addr, ClientConfig{})
	const n = 5
	got := make(chan asyncResult, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for range n {
		req := NewRequest(ReqPullMessage, nil, nil)
		req.OnWritten = wg.Done
		if err := cl.InvokeAsync(req, time.Hour, func(resp *Command, err error) { got <- asyncResult{resp, err} }); err != nil {
			t.Fatal(err)
		}
	}
	var sc *Conn
	for range n {
		sc = <-entered
	}
	wg.Wait() // all written
	sc.Close()
	for range n {
		if r := nextResult(t, got); r.err == nil || r.resp != nil {
			t.Fatalf("request on a closed connection: response %v, err %v", r.resp, r.err)
		}
	}
	<-cl.Done()
	cl.Close() // returns once the connection's goroutines have stopped
	var ranOnWritten atomic.Bool
	req := NewRequest(ReqPullMessage, nil, nil)
	req.OnWritten = func() { ranOnWritten.Store(true) }
	err := cl.InvokeAsync(req, time.Hour, func(*Command, error) { t.Error("done called for a request that was refused") })
	if err == nil {
		t.Fatal("InvokeAsync on a closed connection succeeded")
	}
	if !ranOnWritten.Load() {
		t.Fatal("OnWritten did not run for a refused request")
	}
}
