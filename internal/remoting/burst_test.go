package remoting

import (
	"context"
	"strconv"
	"sync"
	"testing"
)

// burstHandler runs ReqSendMessage inline in bursts and records each
// burst's opaques and, for any other request, a burst of its own marked
// by -1 first. A request whose remark is "panic" makes its burst panic;
// "defer" answers through a Reply after the burst returned.
type burstHandler struct {
	mu     sync.Mutex
	bursts [][]int32
}

func (h *burstHandler) Handle(_ context.Context, _ *Conn, req *Command) *Command {
	h.mu.Lock()
	h.bursts = append(h.bursts, []int32{-1, req.Opaque})
	h.mu.Unlock()
	return req.NewResponse(ResSuccess, "worker")
}

func (*burstHandler) RunsInline(req *Command) bool { return req.Code == ReqSendMessage }

func (h *burstHandler) HandleBurst(_ context.Context, c *Conn, reqs, resps []*Command) {
	ops := make([]int32, len(reqs))
	var later []*Reply
	for i, req := range reqs {
		ops[i] = req.Opaque
		switch req.Remark {
		case "panic":
			panic("burst")
		case "defer":
			later = append(later, c.Defer(req))
			resps[i] = nil
		default:
			resps[i] = req.NewResponse(ResSuccess, "burst "+strconv.Itoa(len(reqs)))
		}
	}
	h.mu.Lock()
	h.bursts = append(h.bursts, ops)
	h.mu.Unlock()
	for _, r := range later {
		r.Send(r.req.NewResponse(ResSuccess, "deferred"))
	}
}

func (h *burstHandler) seen() [][]int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]int32(nil), h.bursts...)
}

// writeFrames writes every request in one write, opaques 1..n.
func writeFrames(t *testing.T, r *rawConn, reqs []*Command) {
	t.Helper()
	var buf []byte
	for i, req := range reqs {
		req.Opaque = int32(i + 1)
		var err error
		if buf, err = EncodeFrame(buf, req); err != nil {
			t.Fatal(err)
		}
	}
	r.write(buf)
}

func sendReq(remark string) *Command {
	c := NewRequest(ReqSendMessage, nil, []byte("body"))
	c.Remark = remark
	return c
}

// Inline requests buffered one after the other are served as bursts, in
// the order they came, the burst before a request handed to a worker
// before it; every request is answered once, deferred ones too.
func TestBurstGathersBufferedInlineRequests(t *testing.T) {
	h := &burstHandler{}
	_, addr := startServer(t, ServerConfig{}, h)
	r := dialRaw(t, addr)
	reqs := []*Command{sendReq(""), sendReq("defer"), sendReq(""), NewRequest(ReqHeartBeat, nil, nil), sendReq(""), sendReq("")}
	writeFrames(t, r, reqs)
	answered := map[int32]string{}
	for range reqs {
		resp := r.read()
		if _, dup := answered[resp.Opaque]; dup {
			t.Fatalf("opaque %d answered twice", resp.Opaque)
		}
		answered[resp.Opaque] = resp.Remark
	}
	if answered[2] != "deferred" || answered[4] != "worker" {
		t.Fatalf("responses %v", answered)
	}
	// Inline requests in their order; the worker's request after every
	// inline request before it (those after it run beside it).
	var order []int32
	gathered, workerAt, threeAt := 0, -1, -1
	for i, b := range h.seen() {
		if b[0] == -1 {
			workerAt = i
			continue
		}
		if len(b) > 1 {
			gathered++
		}
		for _, op := range b {
			if op == 3 {
				threeAt = i
			}
		}
		order = append(order, b...)
	}
	for i, op := range order {
		if want := []int32{1, 2, 3, 5, 6}[i]; op != want {
			t.Fatalf("inline requests served in the order %v (bursts %v)", order, h.seen())
		}
	}
	if workerAt < threeAt {
		t.Fatalf("the worker's request was served before the burst before it: %v", h.seen())
	}
	if gathered == 0 {
		t.Fatalf("no burst of more than one request: %v", h.seen())
	}
}

// A burst takes at most maxBurstRequests; with fewer in-flight slots than
// requests buffered, a burst is served when the slots run out instead of
// waiting for them (which its own requests hold).
func TestBurstLimits(t *testing.T) {
	for _, inflight := range []int{0, 4} {
		h := &burstHandler{}
		_, addr := startServer(t, ServerConfig{MaxInflightPerConn: inflight}, h)
		r := dialRaw(t, addr)
		n := maxBurstRequests + 40
		reqs := make([]*Command, n)
		for i := range reqs {
			reqs[i] = sendReq("")
		}
		writeFrames(t, r, reqs)
		for range reqs {
			r.read()
		}
		limit := maxBurstRequests
		if inflight > 0 {
			limit = inflight
		}
		total := 0
		for _, b := range h.seen() {
			if len(b) > limit {
				t.Fatalf("in-flight %d: a burst of %d", inflight, len(b))
			}
			total += len(b)
		}
		if total != n {
			t.Fatalf("in-flight %d: %d requests served, %d sent", inflight, total, n)
		}
	}
}

// A burst that panics answers every request in it SYSTEM_ERROR, and the
// connection goes on serving.
func TestBurstPanic(t *testing.T) {
	h := &burstHandler{}
	_, addr := startServer(t, ServerConfig{}, h)
	r := dialRaw(t, addr)
	writeFrames(t, r, []*Command{sendReq(""), sendReq("panic"), sendReq("")})
	codes := map[int32]int16{}
	for range 3 {
		resp := r.read()
		codes[resp.Opaque] = resp.Code
	}
	if len(codes) != 3 || codes[2] != ResSystemError {
		t.Fatalf("codes %v", codes)
	}
	writeFrames(t, r, []*Command{sendReq("")})
	if resp := r.read(); resp.Code != ResSuccess {
		t.Fatalf("after the panic: code %d %q", resp.Code, resp.Remark)
	}
}
