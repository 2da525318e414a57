package broker

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// Pull responses lend the store's read buffers to the connection
// (BodyParts) and release them in OnWritten. These tests check that the
// bytes arrive intact and that every lent buffer comes back: after answered
// pulls, pulls whose connection went away with responses still queued, and
// pulls flagged oneway.

const zcMessages = 96

func zcBody(i int) []byte {
	return bytes.Repeat([]byte(fmt.Sprintf("m%03d-", i)), 800) // 4000 bytes
}

// zcEnv stores zcMessages messages of 4000 bytes in queue ZC/0, so one pull
// of 32 spans more than one 256 KiB store buffer.
func zcEnv(t *testing.T) (*env, *client) {
	e := startEnv(t, nil)
	cl := e.dial()
	for i := range zcMessages {
		wantCode(t, cl.sendV1("ZC", 0, "", zcBody(i)), remoting.ResSuccess)
	}
	e.waitMax("ZC", 0, zcMessages)
	wantCode(t, cl.heartbeat("c1", "g", "ZC", "*", "CLUSTERING"), remoting.ResSuccess)
	return e, cl
}

func (e *env) waitReadsReturned() {
	e.t.Helper()
	waitFor(e.t, "read buffers released", func() bool { return e.st.Stats().ReadsLent == 0 })
}

func TestPullZeroCopyBodiesIntactAndReleased(t *testing.T) {
	e, _ := zcEnv(t)
	var wg sync.WaitGroup
	for c := range 4 {
		cl := e.dial()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 10 {
				off := int64((c*7 + round*13) % (zcMessages - 32))
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				resp, err := cl.c.Invoke(ctx, remoting.NewRequest(remoting.ReqPullMessage, pullExt("g", "ZC", 0, off, 0, 0), nil))
				cancel()
				if err != nil || resp.Code != remoting.ResSuccess {
					t.Errorf("pull at %d: %v %v", off, err, resp)
					return
				}
				ms := splitRecords(t, resp.Body)
				if len(ms) != 32 {
					t.Errorf("pull at %d: %d messages", off, len(ms))
					return
				}
				for k, m := range ms {
					if m.QueueOffset != off+int64(k) || !bytes.Equal(m.Body, zcBody(int(off)+k)) {
						t.Errorf("pull at %d: message %d has offset %d and a wrong body", off, k, m.QueueOffset)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	e.waitReadsReturned()
}

func TestPullZeroCopyReleasedWhenConnectionCloses(t *testing.T) {
	e, _ := zcEnv(t)
	nc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	// 64 pulls of 32 x 4 KiB, never read: more than the socket buffers hold,
	// so responses are still queued (their buffers lent) when we go away.
	var frames []byte
	for i := range 64 {
		req := remoting.NewRequest(remoting.ReqPullMessage, pullExt("g", "ZC", 0, int64(i%(zcMessages-32)), 0, 0), nil)
		req.Opaque = int32(i + 1)
		if frames, err = remoting.EncodeFrame(frames, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := nc.Write(frames); err != nil {
		t.Fatal(err)
	}
	// The connection's response byte budget (16 MiB, one 256 KiB buffer per
	// response) stops reading requests once it is full, so not all 64 need
	// be served; the first 8 always are.
	waitFor(t, "pulls served", func() bool { return e.st.Stats().Gets >= 8 })
	nc.(*net.TCPConn).SetLinger(0)
	nc.Close()
	e.waitReadsReturned()
}

func TestPullZeroCopyOnewayReleased(t *testing.T) {
	e, cl := zcEnv(t)
	req := remoting.NewRequest(remoting.ReqPullMessage, pullExt("g", "ZC", 0, 0, 0, 0), nil)
	if err := cl.c.InvokeOneway(req); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "oneway pull served", func() bool { return e.st.Stats().Gets >= 1 })
	e.waitReadsReturned()
	// The connection still works.
	wantCode(t, cl.invoke(remoting.ReqPullMessage, pullExt("g", "ZC", 0, 0, 0, 0), nil), remoting.ResSuccess)
	e.waitReadsReturned()
}

func TestPullZeroCopyHeldPullReleased(t *testing.T) {
	e, cl := zcEnv(t)
	const suspend = remoting.PullFlagSuspend
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan *remoting.Command, 1)
	go func() {
		resp, err := cl.c.Invoke(ctx, remoting.NewRequest(remoting.ReqPullMessage, pullExt("g", "ZC", 0, zcMessages, suspend, 5000), nil))
		if err != nil {
			t.Error(err)
		}
		got <- resp
	}()
	waitFor(t, "pull held", func() bool { return e.b.pulls.held() == 1 })
	wantCode(t, e.dial().sendV1("ZC", 0, "", zcBody(zcMessages)), remoting.ResSuccess)
	resp := <-got
	if resp == nil || resp.Code != remoting.ResSuccess {
		t.Fatalf("held pull answered %v", resp)
	}
	if ms := splitRecords(t, resp.Body); len(ms) != 1 || !bytes.Equal(ms[0].Body, zcBody(zcMessages)) {
		t.Fatalf("held pull returned %d messages", len(ms))
	}
	e.waitReadsReturned()
}
