package remoting

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"
)

// deferrer is a handler that defers every request and hands its Reply to
// the test, which answers later from its own goroutine.
type deferrer struct {
	replies chan *Reply
	// sendFirst answers before the handler returns (Send racing ahead of
	// the hand-off).
	sendFirst bool
	// in makes each Reply in a value of the handler's (DeferIn).
	in bool
}

func newDeferrer() *deferrer { return &deferrer{replies: make(chan *Reply, 1024)} }

func (d *deferrer) Handle(_ context.Context, c *Conn, req *Command) *Command {
	var r *Reply
	if d.in {
		r = c.DeferIn(req, new(Reply))
		if again := c.DeferIn(req, new(Reply)); again != r || c.Defer(req) != r {
			panic("a request deferred again got another Reply")
		}
	} else {
		r = c.Defer(req)
	}
	if d.sendFirst {
		r.Send(req.NewResponse(ResSuccess, "early "+req.Ext("n")))
		return nil
	}
	d.replies <- r
	return nil
}

func (d *deferrer) next(t *testing.T) *Reply {
	t.Helper()
	select {
	case r := <-d.replies:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("no deferred request reached the handler")
		return nil
	}
}

func TestDeferredReplies(t *testing.T) {
	for _, in := range []bool{false, true} {
		t.Run("DeferIn="+strconv.FormatBool(in), func(t *testing.T) { testDeferredReplies(t, in) })
	}
}

func testDeferredReplies(t *testing.T, in bool) {
	for _, st := range []byte{SerializeJSON, SerializeRocketMQ} {
		d := newDeferrer()
		d.in = in
		// No response budget: all 50 are admitted before any is answered
		// (with one, a deferred request counts as running, so only a few
		// would be until responses show their size).
		_, addr := startServer(t, ServerConfig{MaxQueuedBytesPerConn: -1}, d)
		cl := dialClient(t, addr, ClientConfig{})
		const n = 50
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				req := NewRequest(ReqSendMessage, map[string]string{"n": strconv.Itoa(i)}, nil)
				req.SerializeType = st
				resp := invoke(t, cl, req)
				if resp.Remark != "late "+strconv.Itoa(i) || resp.SerializeType != st {
					t.Errorf("request %d got %q (serialize type %d)", i, resp.Remark, resp.SerializeType)
				}
			}()
		}
		// Answer in reverse order of arrival, all from this goroutine:
		// responses are matched by opaque.
		var rs []*Reply
		for range n {
			rs = append(rs, d.next(t))
		}
		for i := len(rs) - 1; i >= 0; i-- {
			rs[i].Send(rs[i].req.NewResponse(ResSuccess, "late "+rs[i].req.Ext("n")))
		}
		wg.Wait()
	}
}

func TestDeferredReplySentBeforeHandlerReturns(t *testing.T) {
	d := newDeferrer()
	d.sendFirst = true
	srv, addr := startServer(t, ServerConfig{MaxInflightPerConn: 1}, d)
	cl := dialClient(t, addr, ClientConfig{})
	for i := range 20 { // one slot: a request whose end was lost would stall the next
		req := NewRequest(ReqSendMessage, map[string]string{"n": strconv.Itoa(i)}, nil)
		if resp := invoke(t, cl, req); resp.Remark != "early "+strconv.Itoa(i) {
			t.Fatalf("got %q", resp.Remark)
		}
	}
	sc := srv.Conns()[0]
	waitFor(t, func() bool { return len(sc.sem) == 0 && sc.budget.stats().Running == 0 })
}

// TestDeferredReplyHoldsInflightSlot: a deferred request keeps its slot
// until Send, so with MaxInflightPerConn 1 the next request is not read.
func TestDeferredReplyHoldsInflightSlot(t *testing.T) {
	d := newDeferrer()
	srv, addr := startServer(t, ServerConfig{MaxInflightPerConn: 1}, d)
	cl := dialClient(t, addr, ClientConfig{})
	got := make(chan string, 2)
	for i := range 2 {
		go func() {
			resp, err := cl.Invoke(context.Background(), NewRequest(ReqSendMessage, map[string]string{"n": strconv.Itoa(i)}, nil))
			if err != nil {
				t.Error(err)
				got <- ""
				return
			}
			got <- resp.Remark
		}()
	}
	first := d.next(t)
	sc := srv.Conns()[0]
	waitFor(t, func() bool { return len(sc.sem) == 1 })
	select {
	case r := <-d.replies:
		t.Fatalf("request %s handled while the deferred one held the only slot", r.req.Ext("n"))
	default:
	}
	first.Send(first.req.NewResponse(ResSuccess, "one"))
	if r := <-got; r != "one" {
		t.Fatalf("first response %q", r)
	}
	second := d.next(t)
	second.Send(second.req.NewResponse(ResSuccess, "two"))
	second.Send(second.req.NewResponse(ResSuccess, "again")) // dropped
	if r := <-got; r != "two" {
		t.Fatalf("second response %q", r)
	}
	waitFor(t, func() bool { return len(sc.sem) == 0 && sc.budget.stats().Queued == 0 })
}

// TestDeferredReplyNeverBlocks: Send returns at once even when the peer
// reads nothing and the queued responses are far over the byte budget.
func TestDeferredReplyNeverBlocks(t *testing.T) {
	d := newDeferrer()
	// A 1 KiB budget admits a first burst of about 8 small requests.
	srv, addr := startServer(t, ServerConfig{MaxQueuedBytesPerConn: 1 << 10, WriteQueueLen: 1}, d)
	r := dialRaw(t, addr)
	const n = 6
	for i := range n {
		req := NewRequest(ReqSendMessage, nil, nil)
		req.Opaque = int32(i + 1)
		r.send(req)
	}
	var rs []*Reply
	for range n {
		rs = append(rs, d.next(t))
	}
	body := make([]byte, 4<<20) // 24 MiB in all: more than the socket buffers take
	sent := make(chan struct{})
	go func() {
		for _, rp := range rs {
			resp := rp.req.NewResponse(ResSuccess, "")
			resp.Body = body
			rp.Send(resp)
		}
		close(sent)
	}()
	select {
	case <-sent:
	case <-time.After(waitTimeout):
		t.Fatal("Send blocked on a peer that does not read")
	}
	if q := srv.Conns()[0].budget.stats().Queued; q <= 1<<10 {
		t.Fatalf("queued %d bytes: the budget was never exceeded, the test proved nothing", q)
	}
	seen := map[int32]bool{}
	for range n {
		resp := r.read()
		if seen[resp.Opaque] || len(resp.Body) != len(body) {
			t.Fatalf("opaque %d twice or body %d bytes", resp.Opaque, len(resp.Body))
		}
		seen[resp.Opaque] = true
	}
}

func TestDeferredReplyOnewayAndClosedConnection(t *testing.T) {
	d := newDeferrer()
	srv, addr := startServer(t, ServerConfig{}, d)
	r := dialRaw(t, addr)
	oneway := NewRequest(ReqSendMessage, nil, nil)
	oneway.Opaque, oneway.Flag = 1, FlagOneway
	r.send(oneway)
	written := make(chan struct{}, 4)
	resp := oneway.NewResponse(ResSuccess, "")
	resp.OnWritten = func() { written <- struct{}{} }
	d.next(t).Send(resp)
	<-written // dropped, not written
	req := NewRequest(ReqSendMessage, nil, nil)
	req.Opaque = 2
	r.send(req)
	if got := d.next(t); got.req.Opaque != 2 {
		t.Fatalf("opaque %d", got.req.Opaque)
	} else {
		d.replies <- got
	}
	pending := d.next(t)
	sc := srv.Conns()[0]
	r.nc.Close()
	<-sc.Done()
	waitFor(t, func() bool { return sc.Err() != nil })
	resp = pending.req.NewResponse(ResSuccess, "")
	resp.OnWritten = func() { written <- struct{}{} }
	pending.Send(resp)
	<-written // dropped on the closed connection
	waitFor(t, func() bool { return len(sc.sem) == 0 && sc.budget.stats().Queued == 0 })
}

// TestShutdownWaitsForDeferredReplies: a graceful shutdown waits for a
// deferred request like for a running handler and writes its response.
func TestShutdownWaitsForDeferredReplies(t *testing.T) {
	d := newDeferrer()
	srv, addr := startServer(t, ServerConfig{}, d)
	cl := dialClient(t, addr, ClientConfig{})
	var rp *Reply
	err := shutdownWaitsForHeld(t, srv, cl, NewRequest(ReqSendMessage, nil, nil),
		func() { rp = d.next(t) }, nil, func() { rp.Send(rp.req.NewResponse(ResSuccess, "drained")) }, "drained")
	if err != nil {
		t.Fatal(err)
	}
}
