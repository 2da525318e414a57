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
	fb := &gatedBudget{claimed: make(chan int64, 4), gate: make(chan struct{}), released: make(chan int64, 4)}
	claimed, gate, released := fb.claimed, fb.gate, fb.released
	cfg := ServerConfig{FrameBudget: fb}
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

// gatedBudget grants a claim once gate is closed.
type gatedBudget struct {
	claimed, released chan int64
	gate              chan struct{}
}

func (g *gatedBudget) ClaimBytes(n int64, done <-chan struct{}) bool {
	g.claimed <- n
	select {
	case <-g.gate:
		return true
	case <-done:
		return false
	}
}

func (g *gatedBudget) ReleaseBytes(n int64) { g.released <- n }
