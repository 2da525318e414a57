// Package amqpbench measures an AMQP 0-9-1 broker with amqp091-go,
// RabbitMQ's Go client: one publisher sends 1 KiB persistent messages to a
// durable queue with publisher confirms (a window of in-flight confirms),
// while one consumer on its own connection takes them with manual
// acknowledgements (one basic.ack per message, a prefetch). It reports the
// confirmed publish rate, the consume rate, and the p50/p99 of the publish
// to confirm latency and of the publish to delivery (end-to-end) latency.
// The same driver runs against Keel and RabbitMQ (bench/sections/50-amqp.sh),
// so the figures compare brokers, not clients.
//
// The client may only be imported by tests and examples, so the driver is
// a test that runs when KEEL_AMQP_BENCH_URL is set:
//
//	KEEL_AMQP_BENCH_URL=amqp://guest:guest@127.0.0.1:5672/ KEEL_AMQP_BENCH_OUT=$PWD/out.json \
//	go test ./bench/amqp -run TestAMQPBench -v
//
// KEEL_AMQP_BENCH_DURATION (10s), KEEL_AMQP_BENCH_QUEUE_TYPE (quorum),
// KEEL_AMQP_BENCH_INFLIGHT (256 confirms outstanding), KEEL_AMQP_BENCH_PREFETCH
// (256), KEEL_AMQP_BENCH_SIZE (1024 bytes) change the run. Without
// KEEL_AMQP_BENCH_URL, TestAMQPBenchSmoke runs the driver for a second
// against an in-process Keel.
package amqpbench

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Result is one run.
type Result struct {
	URL              string  `json:"url"`
	Product          string  `json:"product"`
	Version          string  `json:"version"`
	QueueType        string  `json:"queueType"`
	MessageBytes     int     `json:"messageBytes"`
	Inflight         int     `json:"inflight"`
	Prefetch         int     `json:"prefetch"`
	Seconds          float64 `json:"seconds"`
	Confirmed        int     `json:"confirmed"`
	Nacked           int     `json:"nacked"`
	Consumed         int     `json:"consumed"`
	ConfirmedPerSec  float64 `json:"confirmedPerSec"`
	ConsumedPerSec   float64 `json:"consumedPerSec"`
	ConfirmP50Ms     float64 `json:"confirmP50Ms"`
	ConfirmP99Ms     float64 `json:"confirmP99Ms"`
	EndToEndP50Ms    float64 `json:"endToEndP50Ms"`
	EndToEndP99Ms    float64 `json:"endToEndP99Ms"`
	Redelivered      int     `json:"redelivered"`
	UnconsumedAtStop int     `json:"unconsumedAtStop"`
}

type params struct {
	url                       string
	duration                  time.Duration
	queueType                 string
	inflight, prefetch, bytes int
}

func envInt(k string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(k)); err == nil && v > 0 {
		return v
	}
	return def
}

func TestAMQPBench(t *testing.T) {
	url := os.Getenv("KEEL_AMQP_BENCH_URL")
	if url == "" {
		t.Skip("KEEL_AMQP_BENCH_URL is not set (bench/sections/50-amqp.sh sets it)")
	}
	d, err := time.ParseDuration(cmp.Or(os.Getenv("KEEL_AMQP_BENCH_DURATION"), "10s"))
	if err != nil {
		t.Fatal(err)
	}
	p := params{url: url, duration: d, queueType: cmp.Or(os.Getenv("KEEL_AMQP_BENCH_QUEUE_TYPE"), "quorum"),
		inflight: envInt("KEEL_AMQP_BENCH_INFLIGHT", 256), prefetch: envInt("KEEL_AMQP_BENCH_PREFETCH", 256),
		bytes: envInt("KEEL_AMQP_BENCH_SIZE", 1024)}
	r, err := run(p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	t.Logf("%s", b)
	if out := os.Getenv("KEEL_AMQP_BENCH_OUT"); out != "" {
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// run publishes for p.duration while consuming, then waits for the
// outstanding confirms and for the consumer to catch up (at most 30 s).
func run(p params) (Result, error) {
	r := Result{URL: p.url, QueueType: p.queueType, MessageBytes: p.bytes, Inflight: p.inflight, Prefetch: p.prefetch}
	pubConn, err := amqp.Dial(p.url)
	if err != nil {
		return r, err
	}
	defer pubConn.Close()
	r.Product, _ = pubConn.Properties["product"].(string)
	r.Version, _ = pubConn.Properties["version"].(string)
	ch, err := pubConn.Channel()
	if err != nil {
		return r, err
	}
	queue := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	args := amqp.Table{"x-queue-type": p.queueType}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return r, fmt.Errorf("declare: %w", err)
	}
	defer ch.QueueDelete(queue, false, false, false)
	if err := ch.Confirm(false); err != nil {
		return r, err
	}

	subConn, err := amqp.Dial(p.url)
	if err != nil {
		return r, err
	}
	defer subConn.Close()
	sub, err := subConn.Channel()
	if err != nil {
		return r, err
	}
	if err := sub.Qos(p.prefetch, 0, false); err != nil {
		return r, err
	}
	deliveries, err := sub.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return r, err
	}
	var (
		e2e      []time.Duration
		consumed int
		redeliv  int
		subMu    sync.Mutex
		subDone  = make(chan struct{})
	)
	go func() {
		defer close(subDone)
		for d := range deliveries {
			if len(d.Body) >= 8 {
				sent := time.Unix(0, int64(binary.BigEndian.Uint64(d.Body)))
				subMu.Lock()
				e2e = append(e2e, time.Since(sent))
				consumed++
				if d.Redelivered {
					redeliv++
				}
				subMu.Unlock()
			}
			d.Ack(false)
		}
	}()

	type pending struct {
		dc   *amqp.DeferredConfirmation
		sent time.Time
	}
	window := make(chan pending, p.inflight)
	var confirmLat []time.Duration
	confirmDone := make(chan struct{})
	go func() {
		defer close(confirmDone)
		for pd := range window {
			if pd.dc.Wait() {
				confirmLat = append(confirmLat, time.Since(pd.sent))
				r.Confirmed++
			} else {
				r.Nacked++
			}
		}
	}()
	body := make([]byte, p.bytes)
	start := time.Now()
	for time.Since(start) < p.duration {
		now := time.Now()
		binary.BigEndian.PutUint64(body, uint64(now.UnixNano()))
		dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body})
		if err != nil {
			close(window)
			return r, fmt.Errorf("publish: %w", err)
		}
		window <- pending{dc, now}
	}
	close(window)
	<-confirmDone
	r.Seconds = time.Since(start).Seconds()
	deadline := time.Now().Add(30 * time.Second)
	for {
		subMu.Lock()
		n := consumed
		subMu.Unlock()
		if n >= r.Confirmed || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	consumeSeconds := time.Since(start).Seconds()
	sub.Close()
	<-subDone
	subMu.Lock()
	defer subMu.Unlock()
	r.Consumed, r.Redelivered, r.UnconsumedAtStop = consumed, redeliv, max(0, r.Confirmed-consumed)
	r.ConfirmedPerSec = float64(r.Confirmed) / r.Seconds
	r.ConsumedPerSec = float64(consumed) / consumeSeconds
	r.ConfirmP50Ms, r.ConfirmP99Ms = pct(confirmLat, 50), pct(confirmLat, 99)
	r.EndToEndP50Ms, r.EndToEndP99Ms = pct(e2e, 50), pct(e2e, 99)
	return r, nil
}

// pct returns the p-th percentile of ds in milliseconds (0 if empty).
func pct(ds []time.Duration, p int) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := min(len(ds)-1, len(ds)*p/100)
	return float64(ds[i].Microseconds()) / 1000
}
