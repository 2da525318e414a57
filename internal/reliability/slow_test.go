package reliability

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/vfs"
)

const slowTopic = "Slow"

// memNode opens a node on a fresh MemFS with topic slowTopic (4 queues).
func memNode(t *testing.T, o nodeOptions) *node {
	t.Helper()
	mem := vfs.NewMem()
	if err := mem.MkdirAll(plDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := mustOpenNode(t, mem, plDir, o)
	createTopicOn(t, n, slowTopic, 4)
	return n
}

// fill stores count messages of size bytes in queue 0 of slowTopic.
func fill(t *testing.T, n *node, count, size int) {
	t.Helper()
	cl := n.dial()
	body := make([]byte, size)
	for i := range count {
		resp, err := call(cl, remoting.ReqSendMessage, sendExt(slowTopic, 0,
			message.EncodeProperties(map[string]string{message.PropUniqKey: "fill" + strconv.Itoa(i)})), body)
		if err != nil || resp.Code != remoting.ResSuccess {
			t.Fatalf("fill: %v %v", resp, err)
		}
	}
	waitFor(t, 10*time.Second, "fill visible", func() bool { return n.st.MaxOffset(slowTopic, 0) >= int64(count) })
}

// heapInUse returns the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC() // a second cycle frees what finalizers released
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// frame encodes a request frame.
func frame(t testing.TB, code int16, opaque int32, ext map[string]string, body []byte) []byte {
	t.Helper()
	req := remoting.NewRequest(code, ext, body)
	req.Opaque = opaque
	b, err := remoting.EncodeFrame(nil, req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rawWriter writes frames to a raw TCP connection from a goroutine and
// never reads; it counts the frames the server accepted into its socket.
type rawWriter struct {
	nc      net.Conn
	written atomic.Int64
	done    chan struct{}
}

func startRawWriter(t *testing.T, addr string, frames func(i int) []byte, count int) *rawWriter {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096) // a small receive window: the broker's writes block early
	}
	w := &rawWriter{nc: nc, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := range count {
			if _, err := nc.Write(frames(i)); err != nil {
				return
			}
			w.written.Add(1)
		}
	}()
	t.Cleanup(func() { nc.Close(); <-w.done })
	return w
}

// waitStalled waits until the writer finished or made no progress for
// 300ms (the broker stopped reading: TCP flow control pushes back).
func (w *rawWriter) waitStalled(t *testing.T) int64 {
	t.Helper()
	last, since := int64(-1), time.Now()
	waitFor(t, 60*time.Second, "the stuck client's writes to stall or finish", func() bool {
		select {
		case <-w.done:
			return true
		default:
		}
		if n := w.written.Load(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) > 300*time.Millisecond
	})
	return w.written.Load()
}

// serveNormalClient checks that a well-behaved client's sends and pulls
// complete within bound while others misbehave; it returns the slowest.
func serveNormalClient(t *testing.T, n *node, ops int, bound time.Duration) time.Duration {
	t.Helper()
	cl := n.dial()
	var worst time.Duration
	for i := range ops {
		start := time.Now()
		resp, err := call(cl, remoting.ReqSendMessage, sendExt(slowTopic, 1, ""), []byte("normal"))
		if err != nil || resp.Code != remoting.ResSuccess {
			t.Fatalf("normal send %d: %v %v", i, resp, err)
		}
		resp, err = call(cl, remoting.ReqPullMessage, pullExt("cg-normal", slowTopic, 0, int64(i%5), 1, flagSubscription, 0), nil)
		if err != nil || resp.Code != remoting.ResSuccess {
			t.Fatalf("normal pull %d: %v %v", i, resp, err)
		}
		worst = max(worst, time.Since(start))
	}
	if worst > bound {
		t.Errorf("a normal client's send+pull took %v (bound %v)", worst, bound)
	}
	return worst
}

// TestStuckConsumer: a client pipelines pulls of full-size responses and
// never reads its socket. The broker keeps serving a normal client and its
// memory stays bounded by the connection's response byte budget
// (remoting.ServerConfig.MaxQueuedBytesPerConn, 16 MiB by default): it
// stops reading the client's requests once the budget is full, instead of
// holding every answer. In CI the responses are 64 KiB (MaxPullBytes, each
// holding a 256 KiB store buffer lent for the zero-copy write) to keep the
// test's own memory small; with KEEL_LONG=1 they are the default 1 MiB.
func TestStuckConsumer(t *testing.T) {
	respBytes := 64 << 10
	if long() {
		respBytes = 1 << 20
	}
	n := memNode(t, nodeOptions{brokerCfg: func(c *broker.Config) { c.MaxPullBytes = respBytes }})
	fill(t, n, respBytes/4000+20, 4000) // every pull answer is a full MaxPullBytes
	settle(t)
	base := heapInUse()
	const pulls = 3000
	w := startRawWriter(t, n.addr, func(i int) []byte {
		return frame(t, remoting.ReqPullMessage, int32(i+1), pullExt("cg-stuck", slowTopic, 0, 0, 1024, flagSubscription, 0), nil)
	}, pulls)
	accepted := w.waitStalled(t)
	settle(t)
	grown := int64(heapInUse()) - int64(base)
	var budget remoting.BudgetStats
	for _, c := range n.srv.Conns() {
		if st := c.BudgetStats(); st.Queued > budget.Queued {
			budget = st
		}
	}
	gets := n.st.Stats().Gets
	worst := serveNormalClient(t, n, 20, 10*time.Second)
	t.Logf("SUMMARY stuck consumer: pulls_sent=%d pulls_served=%d response_bytes=%d heap_growth=%d MiB (%d responses' worth) "+
		"queued=%d MiB (budget %d MiB) normal_client_worst=%v",
		accepted, gets, respBytes, grown>>20, grown/int64(respBytes), budget.Queued>>20, budget.Limit>>20, worst)
	// About one budget (plus a few responses admitted before the first
	// was measured); before the budget existed this was 386 MiB (64 KiB
	// answers) and 1792 MiB (1 MiB answers).
	limit := 2*int64(remoting.DefaultMaxQueuedBytesPerConn) + 8*int64(respBytes)
	if grown > limit {
		t.Errorf("heap grew by %d MiB for one stuck consumer (limit %d MiB)", grown>>20, limit>>20)
	}
	if budget.Queued == 0 || budget.Queued > budget.Limit {
		t.Errorf("the stuck connection's queued response bytes %d, budget %d", budget.Queued, budget.Limit)
	}
	if gets >= pulls {
		t.Errorf("all %d pulls were served: the broker did not stop reading the stuck client", gets)
	}
}

// TestHalfFrameClients: clients that send the start of a frame (a length
// claiming 1 MiB and a few bytes) and stall cost the broker no claimed
// buffers, do not slow a normal client, and are closed by the idle timeout.
func TestHalfFrameClients(t *testing.T) {
	n := memNode(t, nodeOptions{server: remoting.ServerConfig{IdleTimeout: time.Second}})
	fill(t, n, 10, 100)
	settle(t)
	base := heapInUse()
	const clients = 300
	conns := make([]net.Conn, clients)
	for i := range conns {
		nc, err := net.Dial("tcp", n.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		f := frame(t, remoting.ReqSendMessage, 1, sendExt(slowTopic, 0, ""), make([]byte, 1<<20))
		if _, err := nc.Write(f[:4+10]); err != nil { // length word and 10 bytes of the header length/header
			t.Fatal(err)
		}
		conns[i] = nc
	}
	settle(t)
	grown := int64(heapInUse()) - int64(base)
	worst := serveNormalClient(t, n, 20, 10*time.Second)
	closed := 0
	for _, nc := range conns {
		nc.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err != nil {
			closed++
		}
	}
	t.Logf("SUMMARY half frames: clients=%d heap_growth=%d KiB per_client=%d B normal_client_worst=%v closed_by_idle_timeout=%d",
		clients, grown>>10, grown/clients, worst, closed)
	if closed != clients {
		t.Errorf("%d of %d stalled connections still open after the idle timeout", clients-closed, clients)
	}
	if limit := int64(64 << 20); grown > limit {
		t.Errorf("heap grew by %d MiB for %d half frames (limit %d MiB): claimed lengths allocated?", grown>>20, clients, limit>>20)
	}
}

// TestTenThousandHeldPulls: ten thousand long-poll pulls held at once over
// a few connections cost bounded memory, do not slow a normal client, are
// all answered when a message arrives, and pulls beyond MaxHeldPulls get
// SYSTEM_BUSY instead of more memory.
func TestTenThousandHeldPulls(t *testing.T) {
	const held, limit, conns = 10000, 10000, 10
	n := memNode(t, nodeOptions{brokerCfg: func(c *broker.Config) { c.MaxHeldPulls = limit }})
	fill(t, n, 10, 100)
	settle(t)
	base := heapInUse()
	type result struct {
		code int16
		err  error
	}
	results := make(chan result, held+100)
	clients := make([]*remoting.Client, conns)
	for i := range clients {
		clients[i] = n.dial()
	}
	for i := range held + 100 {
		cl := clients[i%conns]
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqPullMessage,
				pullExt("cg-held", slowTopic, 2, 0, 32, flagSubscription|flagSuspend, 30000), nil))
			if err != nil {
				results <- result{err: err}
				return
			}
			results <- result{code: resp.Code}
		}()
	}
	busy := 0
	waitFor(t, 60*time.Second, "10000 held pulls and 100 refusals", func() bool {
		for {
			select {
			case r := <-results:
				if r.err != nil || r.code != remoting.ResSystemBusy {
					t.Fatalf("a pull answered before any message arrived: %+v", r)
				}
				busy++
				continue
			default:
			}
			return n.b.Stats().HeldPulls == held && busy == 100
		}
	})
	settle(t)
	grown := int64(heapInUse()) - int64(base)
	worst := serveNormalClient(t, n, 20, 10*time.Second)
	start := time.Now()
	resp, err := call(n.dial(), remoting.ReqSendMessage, sendExt(slowTopic, 2, ""), []byte("wake"))
	if err != nil || resp.Code != remoting.ResSuccess {
		t.Fatalf("send: %v %v", resp, err)
	}
	for range held {
		select {
		case r := <-results:
			if r.err != nil || r.code != remoting.ResSuccess {
				t.Fatalf("held pull answered with %+v, want the new message", r)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("held pulls not all answered after a message arrived")
		}
	}
	t.Logf("SUMMARY held pulls: held=%d system_busy=%d heap_growth=%d MiB per_pull=%d B normal_client_worst=%v all_answered_in=%v",
		held, busy, grown>>20, grown/held, worst, time.Since(start).Round(time.Millisecond))
	if limit := int64(512 << 20); grown > limit {
		t.Errorf("heap grew by %d MiB for %d held pulls (limit %d MiB)", grown>>20, held, limit>>20)
	}
}

// slowSyncFS delays every fsync: a disk slower than the producers.
type slowSyncFS struct {
	vfs.FS
	delay time.Duration
}

type slowSyncFile struct {
	vfs.File
	delay time.Duration
}

func (s slowSyncFS) OpenFile(name string, flag int, perm os.FileMode) (vfs.File, error) {
	f, err := s.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return slowSyncFile{f, s.delay}, nil
}

func (f slowSyncFile) Sync() error {
	time.Sleep(f.delay) // the simulated device latency
	return f.File.Sync()
}

// TestFloodingProducer: producers pipelining sends over a few connections
// faster than a slow disk (5 ms per fsync) can take them. The broker keeps
// serving a normal client, memory stays bounded, and whatever is refused is
// refused with an error code, never a crash or a dropped connection.
func TestFloodingProducer(t *testing.T) {
	mem := vfs.NewMem()
	if err := mem.MkdirAll(plDir, 0o755); err != nil {
		t.Fatal(err)
	}
	n := mustOpenNode(t, slowSyncFS{mem, 5 * time.Millisecond}, plDir, nodeOptions{})
	createTopicOn(t, n, slowTopic, 4)
	fill(t, n, 10, 100)
	settle(t)
	base := heapInUse()
	const conns, perConn, size = 8, 3000, 16 << 10
	var codes sync.Map
	var sent, connErrs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range conns {
		cl := n.dial()
		for g := range 64 { // 64 concurrent senders per connection
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perConn/64; i++ {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := call(cl, remoting.ReqSendMessage, sendExt(slowTopic, int32((c+g+i)%4), ""), make([]byte, size))
					if err != nil {
						connErrs.Add(1)
						return
					}
					v, _ := codes.LoadOrStore(resp.Code, new(atomic.Int64))
					v.(*atomic.Int64).Add(1)
					sent.Add(1)
				}
			}()
		}
	}
	waitFor(t, 60*time.Second, "the flood to build up", func() bool { return sent.Load() >= 500 })
	peak := int64(heapInUse()) - int64(base)
	worst := serveNormalClient(t, n, 10, 20*time.Second)
	close(stop)
	wg.Wait()
	var summary []string
	codes.Range(func(k, v any) bool {
		summary = append(summary, fmt.Sprintf("code%d=%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	t.Logf("SUMMARY flood: sends=%d %v conn_errors=%d heap_during_flood=%d MiB normal_client_worst=%v",
		sent.Load(), summary, connErrs.Load(), peak>>20, worst)
	if connErrs.Load() != 0 {
		t.Errorf("%d flooding requests lost their connection", connErrs.Load())
	}
	if limit := int64(512 << 20); peak > limit {
		t.Errorf("heap %d MiB during the flood (limit %d MiB)", peak>>20, limit>>20)
	}
}

// settle waits until the number of goroutines has not changed for 300ms
// (the broker finished what it could do with the requests it read).
func settle(t *testing.T) {
	t.Helper()
	last, since := -1, time.Now()
	waitFor(t, 60*time.Second, "the broker to settle", func() bool {
		if n := runtime.NumGoroutine(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) > 300*time.Millisecond
	})
}

var _ = fmt.Sprint
