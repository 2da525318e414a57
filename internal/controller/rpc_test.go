package controller

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// silentNode accepts connections and never answers, as a stopped
// controller process or one behind a partition that drops packets does.
func silentNode(t *testing.T) (string, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	accepted := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(conns)
	}
	return ln.Addr().String(), accepted
}

// A node that never answers, first in the list and the leader the client
// last followed, takes a share of a call's deadline, not all of it: the
// live nodes are asked within the same call, every call, as a broker's
// heartbeat (3 s) must reach a new leader within its detection period.
// Once it failed, later calls try it last: they do not wait on it again.
func TestClientPassesASilentNode(t *testing.T) {
	h := newHarness(t)
	l := h.leader()
	silent, accepted := silentNode(t)
	cl := NewClient(append([]string{silent}, h.addrs...))
	defer cl.Close()
	for i := range 3 {
		cl.mu.Lock()
		cl.leader = silent // the leader it followed, stopped since
		cl.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := cl.GetGroup(ctx, "nope")
		cancel()
		if !errors.Is(err, ErrUnknownGroup) {
			t.Fatalf("call %d past a silent node: %v, want the leader's answer %v", i, err, ErrUnknownGroup)
		}
		if n := accepted(); n != 1 {
			t.Fatalf("after call %d the silent node was dialed %d times, want once (then tried last)", i, n)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
		st, err := cl.Status(ctx)
		cancel()
		if err != nil || !st.Acting || st.Addr != h.addrs[l] {
			t.Fatalf("status %d past a silent node: %+v, %v", i, st, err)
		}
	}
}
