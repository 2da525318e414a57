package remoting

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// onceCounter counts OnWritten calls of one command and fails the test on
// a second call.
type onceCounter struct {
	t     *testing.T
	calls atomic.Int32
	total *atomic.Int32
}

func (c *onceCounter) fn() func() {
	return func() {
		if c.calls.Add(1) > 1 {
			c.t.Errorf("OnWritten called %d times", c.calls.Load())
		}
		if c.total != nil {
			c.total.Add(1)
		}
	}
}

func TestEncodeFrameBodyParts(t *testing.T) {
	for _, st := range []byte{SerializeJSON, SerializeRocketMQ} {
		c := &Command{Code: ResSuccess, Flag: FlagResponse, Opaque: 9, SerializeType: st,
			ExtFields: map[string]string{"k": "v"}, Body: []byte("head-"),
			BodyParts: [][]byte{[]byte("one-"), nil, []byte("two")}}
		frame, err := EncodeFrame(nil, c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeFrame(frame)
		if err != nil {
			t.Fatal(err)
		}
		if string(got.Body) != "head-one-two" || got.BodyParts != nil {
			t.Fatalf("serialize type %d: body %q parts %q", st, got.Body, got.BodyParts)
		}
		if c.BodyLen() != len("head-one-two") {
			t.Fatalf("BodyLen %d", c.BodyLen())
		}
		// Parts only, no Body.
		c.Body = nil
		frame, _ = EncodeFrame(nil, c)
		if got, err = DecodeFrame(frame); err != nil || string(got.Body) != "one-two" {
			t.Fatalf("parts only: %q %v", got.Body, err)
		}
	}
}

// partsHandler answers with the request body split over Body and BodyParts.
func partsHandler(t *testing.T, total *atomic.Int32) Handler {
	return HandlerFunc(func(_ context.Context, _ *Conn, req *Command) *Command {
		resp := req.NewResponse(ResSuccess, "")
		b := req.Body
		resp.Body = b[:len(b)/3]
		resp.BodyParts = [][]byte{b[len(b)/3 : 2*len(b)/3], b[2*len(b)/3:]}
		resp.OnWritten = (&onceCounter{t: t, total: total}).fn()
		return resp
	})
}

func TestResponseBodyPartsWrittenAndReleasedOnce(t *testing.T) {
	var total atomic.Int32
	_, addr := startServer(t, ServerConfig{}, partsHandler(t, &total))
	cl := dialClient(t, addr, ClientConfig{})
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := bytes.Repeat([]byte{byte(i)}, 1000+i*37)
			resp, err := cl.Invoke(context.Background(), NewRequest(ReqPullMessage, nil, body))
			if err != nil {
				t.Error(err)
				return
			}
			if !bytes.Equal(resp.Body, body) {
				t.Errorf("request %d: body of %d bytes came back as %d bytes", i, len(body), len(resp.Body))
			}
		}()
	}
	wg.Wait()
	waitFor(t, func() bool { return total.Load() == n })
}

func TestOnWrittenForDroppedCommands(t *testing.T) {
	var total atomic.Int32
	_, addr := startServer(t, ServerConfig{}, partsHandler(t, &total))

	// The response to a oneway request is dropped.
	r := dialRaw(t, addr)
	oneway := NewRequest(ReqPullMessage, nil, []byte("abc"))
	oneway.Opaque, oneway.Flag = 1, FlagOneway
	r.send(oneway)
	waitFor(t, func() bool { return total.Load() == 1 })

	cl := dialClient(t, addr, ClientConfig{MaxFrameBytes: 1024})
	// Too large to send.
	big := NewRequest(ReqSendMessage, nil, nil)
	big.BodyParts = [][]byte{make([]byte, 600), make([]byte, 600)}
	c1 := &onceCounter{t: t}
	big.OnWritten = c1.fn()
	if _, err := cl.Invoke(context.Background(), big); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized parts: %v", err)
	}
	// A header that cannot be encoded.
	bad := NewRequest(ReqSendMessage, nil, []byte("x"))
	bad.SerializeType = 7
	c2 := &onceCounter{t: t}
	bad.OnWritten = c2.fn()
	if err := cl.InvokeOneway(bad); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("bad serialize type: %v", err)
	}
	// A closed connection.
	cl.Close()
	closed := NewRequest(ReqSendMessage, nil, []byte("x"))
	c3 := &onceCounter{t: t}
	closed.OnWritten = c3.fn()
	if err := cl.InvokeOneway(closed); err == nil {
		t.Fatal("send on a closed connection succeeded")
	}
	for i, c := range []*onceCounter{c1, c2, c3} {
		if c.calls.Load() != 1 {
			t.Fatalf("case %d: OnWritten called %d times", i+1, c.calls.Load())
		}
	}
}

// TestOnWrittenWhenConnectionClosesWithQueuedFrames: a peer that stops
// reading fills the socket and the write queue; when it goes away every
// queued or blocked response is released exactly once.
func TestOnWrittenWhenConnectionClosesWithQueuedFrames(t *testing.T) {
	const frames = 64
	part := make([]byte, 1<<20)
	var (
		total    atomic.Int32
		queued   atomic.Int32 // WriteResponse returned nil
		returned atomic.Int32
		sendersW sync.WaitGroup
	)
	counters := make([]*onceCounter, frames)
	h := HandlerFunc(func(_ context.Context, c *Conn, req *Command) *Command {
		sendersW.Add(1)
		go func() {
			defer sendersW.Done()
			for i := range frames {
				resp := req.NewResponse(ResSuccess, "")
				resp.BodyParts = [][]byte{part}
				counters[i] = &onceCounter{t: t, total: &total}
				resp.OnWritten = counters[i].fn()
				if c.WriteResponse(resp) == nil {
					queued.Add(1)
				}
				returned.Add(1)
			}
		}()
		return nil
	})
	_, addr := startServer(t, ServerConfig{WriteQueueLen: 4}, h)
	r := dialRaw(t, addr)
	req := NewRequest(ReqPullMessage, nil, nil)
	req.Opaque = 1
	r.send(req) // and never read the answers
	// The writer is stuck on a full socket once the queue is full too.
	waitFor(t, func() bool { return queued.Load() >= 4 })
	pendingAtClose := queued.Load() - total.Load()
	if tc, ok := r.nc.(*net.TCPConn); ok {
		tc.SetLinger(0) // reset: the server's write fails at once
	}
	r.nc.Close()
	waitFor(t, func() bool { return total.Load() == frames })
	sendersW.Wait()
	if returned.Load() != frames {
		t.Fatalf("%d of %d WriteResponse calls returned", returned.Load(), frames)
	}
	if pendingAtClose <= 0 {
		t.Fatalf("no queued frame was pending when the peer closed (queued %d)", queued.Load())
	}
	for i, c := range counters {
		if c.calls.Load() != 1 {
			t.Fatalf("frame %d: OnWritten called %d times", i, c.calls.Load())
		}
	}
}
