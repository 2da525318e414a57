package remoting

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// heldTracker counts the response bytes handlers created that the
// connection has not released yet (OnWritten), and their peak.
type heldTracker struct {
	created, released atomic.Int64
	held, peak        atomic.Int64
	conn              atomic.Pointer[Conn]
}

func (h *heldTracker) add(resp *Command, n int64) {
	cur := h.held.Add(n)
	for {
		p := h.peak.Load()
		if cur <= p || h.peak.CompareAndSwap(p, cur) {
			break
		}
	}
	h.created.Add(1)
	resp.OnWritten = func() {
		h.held.Add(-n)
		h.released.Add(1)
	}
}

// bigResponses answers every request with a body of size bytes (shared,
// not copied) and says it holds held bytes (0: just the body).
func (h *heldTracker) bigResponses(size, held int) Handler {
	body := make([]byte, size)
	return HandlerFunc(func(_ context.Context, c *Conn, req *Command) *Command {
		h.conn.Store(c)
		resp := req.NewResponse(ResSuccess, "")
		resp.Body, resp.HeldBytes = body, held
		h.add(resp, int64(max(size, held)))
		return resp
	})
}

// stuckPeer pipelines n requests and does not read.
func stuckPeer(t *testing.T, addr string, n int) *rawConn {
	t.Helper()
	r := dialRaw(t, addr)
	go func() {
		var buf []byte
		for i := range n {
			req := NewRequest(ReqPullMessage, map[string]string{"i": strconv.Itoa(i)}, nil)
			req.Opaque = int32(i + 1)
			buf, _ = EncodeFrame(buf[:0], req)
			if _, err := r.nc.Write(buf); err != nil {
				return // the test closed the connection
			}
		}
	}()
	return r
}

// waitStuck waits until the server stopped taking requests: no handler
// running and no room for one more estimated response.
func waitStuck(t *testing.T, h *heldTracker) BudgetStats {
	t.Helper()
	var st BudgetStats
	waitFor(t, func() bool {
		c := h.conn.Load()
		if c == nil {
			return false
		}
		st = c.BudgetStats()
		return st.Running == 0 && st.Queued+st.Waiting+st.Estimate > st.Limit
	})
	return st
}

// A peer that stops reading pins at most about the byte budget: the
// server stops reading its requests; once it reads again, every request
// is answered and every buffer released.
func TestStuckPeerHeldBytesBounded(t *testing.T) {
	for _, c := range []struct {
		name              string
		size, held, total int
	}{
		{"bodies", 64 << 10, 0, 400},
		// A small body lending a large buffer (the zero-copy pull path):
		// the budget counts HeldBytes.
		{"held buffers", 4 << 10, 256 << 10, 4000},
	} {
		t.Run(c.name, func(t *testing.T) {
			const limit = 2 << 20
			total := c.total
			var h heldTracker
			_, addr := startServer(t, ServerConfig{MaxQueuedBytesPerConn: limit}, h.bigResponses(c.size, c.held))
			r := stuckPeer(t, addr, total)
			st := waitStuck(t, &h)
			per := int64(max(c.size, c.held))
			created := h.created.Load()
			t.Logf("stuck: created %d, peak held %d KiB (limit %d KiB), stats %+v", created, h.peak.Load()>>10, limit>>10, st)
			if created >= int64(total) {
				t.Fatalf("all %d requests were handled: the server did not stop reading", created)
			}
			// The bound: the budget, or the first burst admitted before a
			// response was seen (8 requests), plus two responses.
			if peak := h.peak.Load(); peak > max(limit, 8*per)+2*per {
				t.Fatalf("peak held bytes %d above the budget %d + 2 responses", peak, limit)
			}
			// The peer reads again: everything is answered.
			r.nc.SetDeadline(time.Now().Add(waitTimeout))
			seen := make(map[int32]bool, total)
			for len(seen) < total {
				resp := r.read()
				if seen[resp.Opaque] || resp.Code != ResSuccess {
					t.Fatalf("response %d: duplicate or code %d", resp.Opaque, resp.Code)
				}
				seen[resp.Opaque] = true
			}
			waitFor(t, func() bool { return h.released.Load() == int64(total) })
			if h.held.Load() != 0 {
				t.Fatalf("held bytes %d after everything was written", h.held.Load())
			}
			if st := h.conn.Load().BudgetStats(); st.Queued != 0 || st.Waiting != 0 || st.Running != 0 {
				t.Fatalf("budget after draining: %+v", st)
			}
		})
	}
}

// deferredServer answers its first request with total deferred responses
// of size bytes, written one after the other by another goroutine (like
// held pulls answered when messages arrive).
type deferredServer struct {
	h                heldTracker
	body             []byte
	total            int
	returned, failed atomic.Int64
	wg               sync.WaitGroup
	once             sync.Once
}

func (d *deferredServer) handler() Handler {
	return HandlerFunc(func(_ context.Context, c *Conn, req *Command) *Command {
		d.once.Do(func() {
			d.wg.Add(1)
			d.h.conn.Store(c)
			go d.writeAll(c, req)
		})
		return nil
	})
}

func (d *deferredServer) writeAll(c *Conn, req *Command) {
	defer d.wg.Done()
	for i := range d.total {
		resp := req.NewResponse(ResSuccess, "")
		resp.Opaque = int32(i + 1)
		resp.Body = d.body
		d.h.add(resp, int64(len(d.body)))
		if err := c.WriteResponse(resp); err != nil {
			d.failed.Add(1)
		}
		d.returned.Add(1)
	}
}

// Deferred responses (long polling) wait for room as well: WriteResponse
// blocks while the peer does not read; once it reads, everything is
// written.
func TestDeferredResponsesWaitForRoom(t *testing.T) {
	const limit = 1 << 20
	d := &deferredServer{body: make([]byte, 64<<10), total: 300}
	_, addr := startServer(t, ServerConfig{MaxQueuedBytesPerConn: limit, WriteTimeout: -1}, d.handler())
	r := stuckPeer(t, addr, 1)
	waitFor(t, func() bool {
		c := d.h.conn.Load()
		return c != nil && c.BudgetStats().Waiting > 0
	})
	if returned := d.returned.Load(); returned >= int64(d.total) {
		t.Fatalf("all %d WriteResponse calls returned although the peer reads nothing", returned)
	}
	if peak := d.h.peak.Load(); peak > limit+64<<10 {
		t.Fatalf("peak held bytes %d above the budget %d + 1 response", peak, limit)
	}
	r.nc.SetDeadline(time.Now().Add(waitTimeout))
	for range d.total {
		if resp := r.read(); resp.Code != ResSuccess {
			t.Fatalf("code %d", resp.Code)
		}
	}
	d.wg.Wait()
	if d.failed.Load() != 0 || d.h.held.Load() != 0 {
		t.Fatalf("%d WriteResponse failed, %d bytes still held", d.failed.Load(), d.h.held.Load())
	}
}

// A peer that never reads is closed by the write timeout, which releases
// the waiting response and every buffer.
func TestWriteTimeoutReleasesWaitingResponses(t *testing.T) {
	d := &deferredServer{body: make([]byte, 64<<10), total: 300}
	closed := make(chan struct{})
	_, addr := startServer(t, ServerConfig{MaxQueuedBytesPerConn: 1 << 20, WriteTimeout: 300 * time.Millisecond,
		OnConnClose: func(*Conn) { close(closed) }}, d.handler())
	stuckPeer(t, addr, 1)
	select {
	case <-closed:
	case <-time.After(waitTimeout):
		t.Fatal("the write timeout did not close the connection")
	}
	d.wg.Wait()
	if d.failed.Load() == 0 {
		t.Fatal("no WriteResponse failed although the connection closed")
	}
	if d.h.released.Load() != d.h.created.Load() || d.h.held.Load() != 0 {
		t.Fatalf("after close: %d created, %d released, %d bytes held", d.h.created.Load(), d.h.released.Load(), d.h.held.Load())
	}
}

// Small responses on a busy connection are not held back by the budget.
func TestBudgetAdmitsManySmallRequests(t *testing.T) {
	var inside atomic.Int64
	gate := make(chan struct{})
	handler := HandlerFunc(func(_ context.Context, _ *Conn, req *Command) *Command {
		if req.Code == ReqSendMessage {
			inside.Add(1)
			<-gate
			inside.Add(-1)
		}
		return req.NewResponse(ResSuccess, "")
	})
	_, addr := startServer(t, ServerConfig{MaxQueuedBytesPerConn: 1 << 20, MaxInflightPerConn: 256}, handler)
	cl := dialClient(t, addr, ClientConfig{})
	// Warm the estimate with small responses.
	for range 200 {
		invoke(t, cl, NewRequest(ReqHeartBeat, nil, nil))
	}
	var wg sync.WaitGroup
	for range 256 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			invoke(t, cl, NewRequest(ReqSendMessage, nil, nil))
		}()
	}
	waitFor(t, func() bool { return inside.Load() == 256 })
	close(gate)
	wg.Wait()
}
