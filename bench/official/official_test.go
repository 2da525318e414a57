// Package official drives a produce workload of bench/workloads through the
// official RocketMQ Go client (github.com/apache/rocketmq-client-go/v2), so
// that its figures can be set beside those of keel bench's lean client
// (`keel bench -w FILE --namesrv ADDR`). The official client may only be
// imported by tests and examples (internal/archtest), so the driver is a
// test that runs when KEEL_BENCH_WORKLOAD is set:
//
//	KEEL_BENCH_WORKLOAD=$PWD/bench/workloads/sync-async-send.yaml \
//	KEEL_BENCH_NAMESRV=127.0.0.1:9876 KEEL_BENCH_OUT=$PWD/official.json \
//	go test ./bench/official -run TestOfficialClient -v -timeout 30m
//
// (paths absolute: go test runs in bench/official). KEEL_BENCH_QUICK=1
// shortens the workload like --quick. The result is keel bench's JSON
// Result, so `keel bench report` takes it. Produce and produce-consume
// modes are driven: async sends with inflightPerProducer in flight per
// producer (each producer is its own client instance and connection), or
// syncSenders SendSync callers, batches of batchSize through the client's
// batch send, paced at producerRate. The client picks queues itself (round
// robin). In produce-consume mode, consumers push consumers of one group
// (each its own client instance; the client balances the queues among
// them) receive every topic from the start and record end-to-end latency
// from the send stamp in each body (push.go).
// Without KEEL_BENCH_WORKLOAD, TestOfficialClientSmoke checks the driver
// for a second against an in-process broker.
package official

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/keelmq/keel/internal/bench"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

func TestOfficialClient(t *testing.T) {
	path := os.Getenv("KEEL_BENCH_WORKLOAD")
	if path == "" {
		t.Skip("set KEEL_BENCH_WORKLOAD and KEEL_BENCH_NAMESRV to run a workload through the official client")
	}
	w, err := bench.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("KEEL_BENCH_QUICK") != "" {
		w.Shorten(bench.QuickDuration)
	}
	ns := os.Getenv("KEEL_BENCH_NAMESRV")
	res, err := drive(context.Background(), w, ns, os.Getenv("KEEL_BENCH_BROKER_FLUSH"))
	if err != nil {
		t.Fatal(err)
	}
	res.Command = fmt.Sprintf("KEEL_BENCH_WORKLOAD=%s KEEL_BENCH_NAMESRV=%s go test ./bench/official -run TestOfficialClient", path, ns)
	out, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if p := os.Getenv("KEEL_BENCH_OUT"); p != "" {
		if err := os.WriteFile(p, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s", out)
}

// counters are what the senders add to.
type counters struct {
	sent, bytes, errs atomic.Uint64
	lat               bench.Recorder
	errMu             sync.Mutex
	firstErr          error // guarded by errMu
}

func (c *counters) fail(err error) {
	c.errs.Add(1)
	c.errMu.Lock()
	if c.firstErr == nil {
		c.firstErr = err
	}
	c.errMu.Unlock()
}

type snap struct {
	at                time.Time
	sent, bytes, errs uint64
	lat               *bench.Histogram
}

func (c *counters) snap() snap {
	return snap{at: time.Now(), sent: c.sent.Load(), bytes: c.bytes.Load(), errs: c.errs.Load(), lat: c.lat.Snapshot()}
}

// drive runs w's produce side through the official client.
func drive(ctx context.Context, w bench.Workload, ns, flush string) (*bench.Result, error) {
	if w.Mode != bench.ModeProduce && w.Mode != bench.ModeProduceConsume {
		return nil, fmt.Errorf("the official-client driver runs produce and produce-consume workloads only, not %s", w.Mode)
	}
	topics, err := bench.SetupTopics(ctx, w, bench.Options{NamesrvAddr: ns, TopicPrefix: "keel-bench-official"})
	if err != nil {
		return nil, err
	}
	var c counters
	var rc *receivers
	if w.Mode == bench.ModeProduceConsume {
		if rc, err = startConsumers(w, ns, topics); err != nil {
			return nil, err
		}
		defer rc.shutdown()
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for i := range w.Producers {
		p, err := producer.NewDefaultProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
			producer.WithGroupName("keel-bench-official"), producer.WithInstanceName(fmt.Sprintf("bench-%d-%d", os.Getpid(), i)),
			producer.WithRetry(0), producer.WithSendMsgTimeout(30*time.Second))
		if err != nil {
			return nil, err
		}
		if err := p.Start(); err != nil {
			return nil, err
		}
		defer p.Shutdown()
		s := &sender{p: p, w: &w, topics: topics, c: &c, pace: bench.NewPacer(w.ProducerRate / float64(w.Producers*w.BatchSize))}
		wg.Add(1)
		go func() { defer wg.Done(); s.run(stop, i) }()
	}
	time.Sleep(w.Warmup) // the senders run; nothing else to wait for
	base, rbase := c.snap(), rc.snap()
	time.Sleep(w.Duration)
	end, rend := c.snap(), rc.snap()
	close(stop)
	wg.Wait()
	if rc != nil && !rc.drain(c.sent.Load(), drainTimeout) {
		return nil, fmt.Errorf("consumers received %d of %d messages sent in %v after the producers stopped",
			rc.received.Load(), c.sent.Load(), drainTimeout)
	}
	d := end.at.Sub(base.at)
	tp := bench.Throughput{Messages: end.sent - base.sent, Bytes: end.bytes - base.bytes, Seconds: d.Seconds(),
		Errors: end.errs - base.errs, Latency: end.lat.Sub(base.lat).Summarize()}
	tp.MsgsPerSec = float64(tp.Messages) / d.Seconds()
	tp.MBPerSec = float64(tp.Bytes) / d.Seconds() / 1e6
	w.Name += "-official"
	w.Description = strings.TrimSpace(w.Description + " (official Go client)")
	res := &bench.Result{Workload: w, Started: start, Elapsed: time.Since(start).Seconds(), Send: &tp,
		TotalSent: c.sent.Load(), TotalSendErrors: c.errs.Load(),
		Broker: bench.BrokerInfo{FlushDiskType: flush, NamesrvAddr: ns}}
	if rc != nil {
		res.Receive = rc.throughput(rbase, rend)
		res.TotalReceived = rc.received.Load()
	}
	if c.firstErr != nil {
		res.Errors = map[string]uint64{"send: " + c.firstErr.Error(): c.errs.Load()}
	}
	return res, nil
}

// sender drives one official producer.
type sender struct {
	p      rocketmq.Producer
	w      *bench.Workload
	topics []string
	c      *counters
	pace   *bench.Pacer
	next   atomic.Uint64
}

func (s *sender) run(stop <-chan struct{}, seed int) {
	s.next.Store(uint64(seed))
	var wg sync.WaitGroup
	if s.w.SyncSenders > 0 {
		n := s.w.SyncSenders / s.w.Producers
		for range max(n, 1) {
			wg.Add(1)
			go func() { defer wg.Done(); s.syncLoop(stop) }()
		}
		wg.Wait()
		return
	}
	window := make(chan struct{}, s.w.InflightPerProducer)
	for s.pace.Wait(stop) {
		select {
		case <-stop:
			wg.Wait()
			return
		case window <- struct{}{}:
		}
		msgs, begin := s.messages(), time.Now()
		wg.Add(1)
		err := s.p.SendAsync(context.Background(), func(_ context.Context, r *primitive.SendResult, err error) {
			defer wg.Done()
			s.done(begin, r, err)
			<-window
		}, msgs...)
		if err != nil {
			wg.Done()
			s.c.fail(err)
			<-window
		}
	}
	wg.Wait()
}

func (s *sender) syncLoop(stop <-chan struct{}) {
	for s.pace.Wait(stop) {
		select {
		case <-stop:
			return
		default:
		}
		msgs, begin := s.messages(), time.Now()
		r, err := s.p.SendSync(context.Background(), msgs...)
		s.done(begin, r, err)
	}
}

func (s *sender) done(begin time.Time, r *primitive.SendResult, err error) {
	switch {
	case err != nil:
		s.c.fail(err)
	case r.Status != primitive.SendOK:
		s.c.fail(fmt.Errorf("send status %d", r.Status))
	default:
		s.c.lat.Record(time.Since(begin))
		s.c.sent.Add(uint64(s.w.BatchSize))
		s.c.bytes.Add(uint64(s.w.BatchSize * s.w.MessageSize))
	}
}

// messages makes one request's messages (a batch shares its topic).
func (s *sender) messages() []*primitive.Message {
	topic := s.topics[s.next.Add(1)%uint64(len(s.topics))]
	now := time.Now()
	msgs := make([]*primitive.Message, s.w.BatchSize)
	for i := range msgs {
		body := make([]byte, s.w.MessageSize)
		bench.StampBody(body, now)
		msgs[i] = primitive.NewMessage(topic, body)
	}
	return msgs
}
