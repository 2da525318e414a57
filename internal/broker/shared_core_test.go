package broker

import (
	"context"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// wantAnswered waits for the answer of a held pull.
func wantAnswered(t *testing.T, ch <-chan *remoting.Command, code int16) {
	t.Helper()
	select {
	case resp := <-ch:
		if resp == nil {
			t.Fatal("no response")
		}
		wantCode(t, resp, code)
	case <-time.After(5 * time.Second):
		t.Fatal("held pull not answered on Close")
	}
}

// TestSharedCoreCloseAnswersOwnPulls: on a core shared with other front
// doors (NewOnCore, as cmd/keel builds it), closing the RocketMQ door
// answers its own held pulls and refuses new ones, but leaves the other
// doors' waits held and the core serving.
func TestSharedCoreCloseAnswersOwnPulls(t *testing.T) {
	e := &env{t: t, dir: t.TempDir(), fs: vfs.OS{}, flush: store.AsyncFlush, sharedCore: true}
	e.cfg = DefaultConfig()
	e.cfg.DataDir = e.dir
	e.start()
	t.Cleanup(e.shutdown)
	c := e.core
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
	if n := e.b.pulls.held(); n != 1 {
		t.Fatalf("the broker reports %d held pulls, want its own 1 (not the other door's wait)", n)
	}
	if err := e.b.Close(); err != nil {
		t.Fatal(err)
	}
	wantAnswered(t, ch, remoting.ResPullNotFound)
	if n := e.b.pulls.held(); n != 0 {
		t.Fatalf("%d held pulls after Close", n)
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
