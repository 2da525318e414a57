package broker

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// startShared starts the RocketMQ front door on a core the test owns, as
// cmd/keel does (NewOnCore).
func startShared(t *testing.T) (*env, *core.Broker) {
	t.Helper()
	e := &env{t: t, dir: t.TempDir()}
	scfg := store.DefaultConfig(e.dir)
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.ConsumeQueueSegmentEntries = 1000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 1000, 4000
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.DataDir, cfg.AdvertisedAddr = e.dir, ln.Addr().String()
	cc, err := CoreConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := core.New(cc, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewOnCore(cfg, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := remoting.NewServer(remoting.ServerConfig{OnConnClose: b.OnConnClose}, b.Handler())
	go srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); b.Run(ctx) }()
	e.st, e.b, e.srv, e.addr, e.stop, e.done = st, b, srv, ln.Addr().String(), cancel, done
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		b.Close()
		e.stop()
		<-e.done
		c.Close()
		st.Close()
	})
	return e, c
}

// TestSharedCoreCloseAnswersOwnPulls: on a core shared with other front
// doors, closing the RocketMQ door answers its own held pulls and refuses
// new ones, but leaves the other doors' waits held and the core serving.
func TestSharedCoreCloseAnswersOwnPulls(t *testing.T) {
	e, c := startShared(t)
	if e.b.Core() != c {
		t.Fatal("the broker does not serve the core it was given")
	}
	cl := e.dial()
	wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	e.waitMax("T", 0, 1)
	ch := cl.invokeAsync(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, remoting.PullFlagSuspend, 15000))
	waitFor(t, "pull held", func() bool { return c.HeldWaits() == 1 })
	other := make(chan error, 1) // another front door's wait on the same core
	go func() { other <- c.WaitForData(context.Background(), "T", 1, 0) }()
	waitFor(t, "other wait held", func() bool { return c.HeldWaits() == 2 })
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case resp := <-ch:
		if resp == nil {
			t.Fatal("no response")
		}
		wantCode(t, resp, remoting.ResPullNotFound)
	case <-time.After(5 * time.Second):
		t.Fatal("held pull not answered on Close")
	}
	if n := c.HeldWaits(); n != 1 {
		t.Fatalf("%d waits held after the broker closed, want the other door's 1", n)
	}
	wantCode(t, cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 1, remoting.PullFlagSuspend, 15000), nil), remoting.ResSystemBusy)
	c.Close()
	select {
	case err := <-other:
		if err != nil {
			t.Fatalf("other wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the core's Close did not wake the other door's wait")
	}
}
