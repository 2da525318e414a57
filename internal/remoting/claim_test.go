package remoting

import (
	"context"
	"testing"
	"time"
)

// TestClaimFrame: each inbound frame is claimed at its length before it
// is read, the connection reads nothing while the claim waits, and the
// claim is given back once the frame is decoded.
func TestClaimFrame(t *testing.T) {
	claimed := make(chan int64, 4)
	gate := make(chan struct{})
	released := make(chan int64, 4)
	cfg := ServerConfig{ClaimFrame: func(n int64, done <-chan struct{}) (func(), bool) {
		claimed <- n
		select {
		case <-gate:
		case <-done:
			return nil, false
		}
		return func() { released <- n }, true
	}}
	_, addr := startServer(t, cfg, echo)
	cl := dialClient(t, addr, ClientConfig{})
	body := make([]byte, 1000)
	respc := make(chan *Command, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		resp, err := cl.Invoke(ctx, NewRequest(ReqHeartBeat, nil, body))
		if err != nil {
			t.Error(err)
		}
		respc <- resp
	}()
	n := <-claimed
	if n < int64(len(body))+8 {
		t.Fatalf("claimed %d bytes for a frame with a %d-byte body", n, len(body))
	}
	select {
	case <-respc:
		t.Fatal("answered before the claim was granted")
	case <-time.After(100 * time.Millisecond):
	}
	close(gate)
	if r := <-respc; r == nil || len(r.Body) != len(body) {
		t.Fatalf("response %v", r)
	}
	if got := <-released; got != n {
		t.Fatalf("released %d, claimed %d", got, n)
	}
}
