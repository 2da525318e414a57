package remoting

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// inlineHandler runs ReqSendMessage inline; each request reports itself on
// started and waits for a value on release before it answers.
type inlineHandler struct {
	started chan int16
	release chan struct{}
}

func (h inlineHandler) Handle(_ context.Context, _ *Conn, req *Command) *Command {
	h.started <- req.Code
	<-h.release
	return req.NewResponse(ResSuccess, "")
}

func (inlineHandler) RunsInline(req *Command) bool { return req.Code == ReqSendMessage }

// TestInlineRequestsHoldTheReader: a request the handler runs inline is
// served on the reader, so the next frame is not even read before it
// returns; requests handed to workers still run side by side. A graceful
// Shutdown waits for an inline request like for any other.
func TestInlineRequestsHoldTheReader(t *testing.T) {
	h := inlineHandler{started: make(chan int16, 4), release: make(chan struct{})}
	srv, addr := startServer(t, ServerConfig{}, h)
	cl := dialClient(t, addr, ClientConfig{})
	got := make(chan asyncResult, 4)
	send := func(code int16) {
		t.Helper()
		if err := cl.InvokeAsync(NewRequest(code, nil, nil), waitTimeout, func(resp *Command, err error) { got <- asyncResult{resp, err} }); err != nil {
			t.Fatal(err)
		}
	}
	started := func() int16 {
		t.Helper()
		select {
		case code := <-h.started:
			return code
		case <-time.After(waitTimeout):
			t.Fatal("no request started")
			return 0
		}
	}
	notStarted := func(what string) {
		t.Helper()
		// A worker would have started the request at once; give the reader
		// time to show that it does not read it.
		select {
		case code := <-h.started:
			t.Fatalf("%s: request %d started", what, code)
		case <-time.After(100 * time.Millisecond):
		}
	}
	// Handed-over requests run side by side.
	send(ReqPullMessage)
	send(ReqPullMessage)
	started()
	started()
	h.release <- struct{}{}
	h.release <- struct{}{}
	nextResult(t, got)
	nextResult(t, got)

	// An inline request holds the reader: the pull behind it waits.
	send(ReqSendMessage)
	if code := started(); code != ReqSendMessage {
		t.Fatalf("started %d", code)
	}
	send(ReqPullMessage)
	notStarted("behind an inline request")
	h.release <- struct{}{} // the send answers, the reader reads the pull
	if code := started(); code != ReqPullMessage {
		t.Fatalf("started %d", code)
	}
	h.release <- struct{}{}
	for range 2 {
		if r := nextResult(t, got); r.err != nil || r.resp.Code != ResSuccess {
			t.Fatalf("response %v, err %v", r.resp, r.err)
		}
	}

	// Shutdown waits for an inline request in progress and flushes its
	// response.
	send(ReqSendMessage)
	started()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	waitFor(t, func() bool { return srv.isClosing() })
	select {
	case err := <-shut:
		t.Fatalf("shutdown returned %v with an inline request in progress", err)
	case <-time.After(50 * time.Millisecond):
	}
	h.release <- struct{}{}
	if r := nextResult(t, got); r.err != nil || r.resp.Code != ResSuccess {
		t.Fatalf("inline request during shutdown: response %v, err %v", r.resp, r.err)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// listingHandler lists ReqSendMessageV2 and answers every request with
// whether its ext fields arrived as a map and its field "b".
type listingHandler struct{}

func (listingHandler) Handle(_ context.Context, _ *Conn, req *Command) *Command {
	resp := req.NewResponse(ResSuccess, "")
	resp.SetExt("mapped", strconv.FormatBool(req.ExtFields != nil))
	resp.SetExt("b", req.Ext("b"))
	return resp
}

func (listingHandler) ListsExt(code int16) bool { return code == ReqSendMessageV2 }

// TestServerDecodesListedCodesAsList: the server decodes the ext fields of
// a request whose code its handler lists as a list, the others (and every
// response, at the client) as a map; both read the same.
func TestServerDecodesListedCodesAsList(t *testing.T) {
	_, addr := startServer(t, ServerConfig{}, listingHandler{})
	cl := dialClient(t, addr, ClientConfig{})
	for _, tc := range []struct {
		code   int16
		mapped string
	}{{ReqSendMessageV2, "false"}, {ReqSendMessage, "true"}} {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		resp, err := cl.Invoke(ctx, NewRequest(tc.code, map[string]string{"a": "pg", "b": "TopicTest"}, nil))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if resp.ExtFields == nil || resp.Ext("mapped") != tc.mapped || resp.Ext("b") != "TopicTest" {
			t.Fatalf("code %d: response ext %v, want mapped=%s b=TopicTest", tc.code, resp.ExtFields, tc.mapped)
		}
	}
}
