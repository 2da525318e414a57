package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// sendChecker is a remoting server standing in for a broker: it checks
// that every SEND_MESSAGE is intact (the body's stamp matches the header's
// bornTimestamp: a send buffer reused before its frame was written would
// break that), holds each request for a moment so the window fills, and
// tracks how many it holds at once.
type sendChecker struct {
	held, maxHeld atomic.Int32
	served        atomic.Int64
	mu            sync.Mutex
	bad           []string
	conns         chan *remoting.Conn
}

func (s *sendChecker) Handle(_ context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	select {
	case s.conns <- c:
	default:
	}
	n := s.held.Add(1)
	for m := s.maxHeld.Load(); n > m && !s.maxHeld.CompareAndSwap(m, n); m = s.maxHeld.Load() {
	}
	defer s.held.Add(-1)
	time.Sleep(200 * time.Microsecond) // a request in service: lets the window fill
	if err := checkSend(req); err != nil {
		s.mu.Lock()
		s.bad = append(s.bad, err.Error())
		s.mu.Unlock()
	}
	s.served.Add(1)
	return req.NewResponse(remoting.ResSuccess, "")
}

func checkSend(req *remoting.Command) error {
	born, err := strconv.ParseInt(req.Ext("bornTimestamp"), 10, 64)
	if err != nil {
		return err
	}
	if len(req.Body) != 256 || string(req.Body[8:stampBytes]) != bodyMagic {
		return fmt.Errorf("body of %d bytes, magic %q", len(req.Body), req.Body[8:stampBytes])
	}
	stamp := time.Unix(0, int64(binary.BigEndian.Uint64(req.Body))).UnixMilli()
	if stamp != born {
		return fmt.Errorf("body stamped %d ms, header born %d ms", stamp, born)
	}
	return nil
}

func startChecker(t *testing.T) (*sendChecker, string) {
	t.Helper()
	s := &sendChecker{conns: make(chan *remoting.Conn, 1)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := remoting.NewServer(remoting.ServerConfig{MaxInflightPerConn: 1024}, s)
	go srv.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return s, ln.Addr().String()
}

func asyncProducer(t *testing.T, addr string, window int) *producer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w := DefaultWorkload()
	w.MessageSize, w.InflightPerProducer = 256, window
	q := MessageQueue{Topic: "T", BrokerAddr: addr}
	return &producer{cl: cl, queues: []MessageQueue{q}, w: &w, st: newStats(), group: "g", workers: window,
		acked: map[MessageQueue]*atomic.Uint64{q: new(atomic.Uint64)}}
}

// waitUntil polls cond until it holds or 10 s pass.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// startProducer runs p; the function it returns stops p and fails the
// test unless run returns within 10 s.
func startProducer(t *testing.T, p *producer) (stop func()) {
	t.Helper()
	stopc := make(chan struct{})
	returned := make(chan struct{})
	go func() {
		p.run(stopc)
		close(returned)
	}()
	return func() {
		t.Helper()
		close(stopc)
		select {
		case <-returned:
		case <-time.After(10 * time.Second):
			t.Fatal("run did not return after stop")
		}
	}
}

// TestAsyncProducerKeepsItsWindow: an unpaced asynchronous producer keeps
// exactly its window of requests in flight (it fills it and never
// exceeds it), every request arrives intact although buffers are reused,
// and after stop it returns once all requests are answered, each counted.
func TestAsyncProducerKeepsItsWindow(t *testing.T) {
	chk, addr := startChecker(t)
	const window = 16
	p := asyncProducer(t, addr, window)
	stop := startProducer(t, p)
	waitUntil(t, "2,000 requests served", func() bool { return chk.served.Load() >= 2000 })
	stop()
	if m := chk.maxHeld.Load(); m != window {
		t.Fatalf("at most %d requests in flight, want the window of %d", m, window)
	}
	chk.mu.Lock()
	defer chk.mu.Unlock()
	if len(chk.bad) > 0 {
		t.Fatalf("%d damaged requests, first: %s", len(chk.bad), chk.bad[0])
	}
	if sent, served := p.st.sent.Load(), chk.served.Load(); sent != uint64(served) || p.st.sendErrors.Load() != 0 {
		t.Fatalf("counted %d sent and %d errors, the server answered %d", sent, p.st.sendErrors.Load(), served)
	}
	if n := p.st.sendLat.Snapshot().Count(); n != p.st.sent.Load() {
		t.Fatalf("%d latencies for %d sends", n, p.st.sent.Load())
	}
}

// TestAsyncProducerSurvivesAClosedConnection: when the connection closes
// under a running producer, the requests in flight and every later one
// count as errors, and run still returns at stop.
func TestAsyncProducerSurvivesAClosedConnection(t *testing.T) {
	chk, addr := startChecker(t)
	p := asyncProducer(t, addr, 8)
	stop := startProducer(t, p)
	waitUntil(t, "requests served", func() bool { return chk.served.Load() >= 100 })
	(<-chk.conns).Close()
	waitUntil(t, "send errors", func() bool { return p.st.sendErrors.Load() >= 100 })
	stop()
	if p.st.errorTable()["send: transport error (connection closed or failed)"] == 0 {
		t.Fatalf("errors %v", p.st.errorTable())
	}
	if p.cl.Conn().Err() == nil {
		t.Fatal("the producer's connection is still open")
	}
}
