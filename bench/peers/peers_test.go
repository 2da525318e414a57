// Package peers drives one broker with one workload through that broker's
// own usual client, for bench/sections/80-peers.sh: Keel's Kafka door
// (franz-go), its RocketMQ door (the official Go client), its AMQP door and
// RabbitMQ quorum queues (amqp091-go with publisher confirms), RabbitMQ
// streams (RabbitMQ's stream client) and NATS JetStream (nats.go). Every
// driver runs the same workload: producers that each keep a window of
// unacknowledged messages full, consumers that take them as they come, a
// warm-up, then a measured window of fixed length. It reports the
// acknowledged publish rate, the delivered rate, the end-to-end latency
// (the send time is the first 8 bytes of every body) and the broker's CPU
// time per acknowledged message (user+system time of the broker processes
// from /proc/PID/stat over the measured window).
//
// This is its own module (bench/peers/go.mod) so that the peers' clients
// never become dependencies of Keel. The drivers are tests, run when
// KEEL_PEER_DRIVER names one (the section script builds the test binary
// and sets the environment):
//
//	KEEL_PEER_DRIVER=nats KEEL_PEER_ADDR=nats://127.0.0.1:4222 KEEL_PEER_PIDS=1234 \
//	KEEL_PEER_OUT=$PWD/nats.json go test -run TestPeer -v
//
// KEEL_PEER_DRIVER: kafka, rocketmq, amqp, stream or nats. KEEL_PEER_ADDR:
// the Kafka bootstrap address, the RocketMQ NameServer, an AMQP URL, a
// rabbitmq-stream URL or a NATS URL. KEEL_PEER_PIDS: the broker's process
// ids, comma separated. KEEL_PEER_WARMUP (5s), KEEL_PEER_DURATION (20s),
// KEEL_PEER_PRODUCERS (4), KEEL_PEER_INFLIGHT (256 per producer),
// KEEL_PEER_CONSUMERS (4), KEEL_PEER_SIZE (1024), KEEL_PEER_PARTITIONS (8:
// Kafka partitions, RocketMQ queues), KEEL_PEER_TOPIC (the RocketMQ topic,
// which the script creates), KEEL_PEER_COMPRESSION (Kafka: none, snappy,
// lz4 or zstd) and KEEL_PEER_PAYLOAD (random, or json: compressible
// JSON-like records) change the run. Without KEEL_PEER_DRIVER,
// TestPeerSmoke runs the harness and the NATS driver for a second against
// an in-process NATS server.
package peers

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// config is one run's workload.
type config struct {
	driver, addr, topic, compression, payload   string
	pids                                        []int
	warmup, duration                            time.Duration
	producers, inflight, consumers, size, parts int
}

// Result is what a run writes (JSON).
type Result struct {
	Driver          string  `json:"driver"`
	Addr            string  `json:"addr"`
	Producers       int     `json:"producers"`
	InflightPerProd int     `json:"inflight_per_producer"`
	Consumers       int     `json:"consumers"`
	MessageBytes    int     `json:"message_bytes"`
	Partitions      int     `json:"partitions,omitempty"`
	Compression     string  `json:"compression,omitempty"`
	Payload         string  `json:"payload"`
	Seconds         float64 `json:"seconds"`
	Acked           int64   `json:"acked"`
	Delivered       int64   `json:"delivered"`
	PublishPerSec   float64 `json:"publish_msgs_per_sec"`
	DeliverPerSec   float64 `json:"deliver_msgs_per_sec"`
	E2EP50Ms        float64 `json:"e2e_p50_ms"`
	E2EP99Ms        float64 `json:"e2e_p99_ms"`
	E2ESamples      uint64  `json:"e2e_samples"`
	BrokerCPUSecs   float64 `json:"broker_cpu_seconds"`
	CPUPerMsgUs     float64 `json:"broker_cpu_us_per_msg"`
	Errors          int64   `json:"errors"`
	FirstError      string  `json:"first_error,omitempty"`
}

// driver runs producers and consumers until ctx ends; stop then waits for
// them and closes the clients.
type driver interface {
	start(ctx context.Context, c *config, r *recorder) error
	stop()
}

func drivers(name string) (driver, error) {
	switch name {
	case "kafka":
		return &kafkaDriver{}, nil
	case "rocketmq":
		return &rocketDriver{}, nil
	case "amqp":
		return &amqpDriver{}, nil
	case "stream":
		return &streamDriver{}, nil
	case "nats":
		return &natsDriver{}, nil
	}
	return nil, fmt.Errorf("unknown driver %q (kafka, rocketmq, amqp, stream, nats)", name)
}

// recorder is what the drivers report to.
type recorder struct {
	acked, failed, delivered atomic.Int64
	measuring                atomic.Bool
	e2e                      histogram
	errMu                    sync.Mutex
	firstErr                 error // guarded by errMu
	template                 []byte
}

func (r *recorder) ack(n int) { r.acked.Add(int64(n)) }

func (r *recorder) fail(err error) {
	r.failed.Add(1)
	r.errMu.Lock()
	if r.firstErr == nil {
		r.firstErr = err
	}
	r.errMu.Unlock()
}

// deliver counts one delivered body and, in the measured window, its
// end-to-end latency.
func (r *recorder) deliver(body []byte) {
	r.delivered.Add(1)
	if len(body) < 8 || !r.measuring.Load() {
		return
	}
	sent := int64(binary.BigEndian.Uint64(body))
	r.e2e.record(time.Duration(time.Now().UnixNano() - sent))
}

// body returns a new message body: the template with the send time in
// its first 8 bytes.
func (r *recorder) body() []byte {
	b := make([]byte, len(r.template))
	copy(b, r.template)
	binary.BigEndian.PutUint64(b, uint64(time.Now().UnixNano()))
	return b
}

// makeTemplate returns a body of size bytes: random (incompressible), or
// JSON-like records that compress about as well as real ones do.
func makeTemplate(kind string, size int) []byte {
	if kind != "json" {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		return b
	}
	var buf bytes.Buffer
	buf.Write(make([]byte, 8)) // the send time
	names := []string{"checkout", "login", "search", "view", "cart", "logout"}
	for i := 0; buf.Len() < size; i++ {
		fmt.Fprintf(&buf, `{"id":%d,"user":"user-%05d","event":%q,"ts":"2026-12-02T01:%02d:%02d.%03dZ","amount":%d.%02d,"tags":["web","eu-west"],"ok":%t}`+"\n",
			rand.IntN(1_000_000), rand.IntN(20000), names[rand.IntN(len(names))], rand.IntN(60), rand.IntN(60), rand.IntN(1000),
			rand.IntN(500), rand.IntN(100), rand.IntN(2) == 0)
	}
	return buf.Bytes()[:size]
}

// histogram is a log-linear latency histogram: buckets 1 % wide from 1 µs
// to about 10 minutes.
type histogram struct {
	n       atomic.Uint64
	buckets [2100]atomic.Uint64
}

const bucketBase = 1.01

func (h *histogram) record(d time.Duration) {
	us := max(float64(d)/1e3, 1)
	i := min(int(math.Log(us)/math.Log(bucketBase)), len(h.buckets)-1)
	h.buckets[i].Add(1)
	h.n.Add(1)
}

// quantile returns the q-quantile in milliseconds (the bucket's upper
// bound), 0 without samples.
func (h *histogram) quantile(q float64) float64 {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i := range h.buckets {
		seen += h.buckets[i].Load()
		if seen >= rank {
			return math.Pow(bucketBase, float64(i+1)) / 1e3
		}
	}
	return math.Pow(bucketBase, float64(len(h.buckets))) / 1e3
}

// cpuSeconds is the user+system CPU time of the processes so far.
func cpuSeconds(pids []int) (float64, error) {
	var total float64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
		ut, err1 := strconv.ParseFloat(fields[11], 64)                // utime, field 14
		st, err2 := strconv.ParseFloat(fields[12], 64)                // stime, field 15
		if err := errors.Join(err1, err2); err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		total += (ut + st) / 100 // USER_HZ, 100 on Linux
	}
	return total, nil
}

// measure runs c through d: warm-up, then the measured window.
func measure(c *config, d driver) (Result, error) {
	res := Result{Driver: c.driver, Addr: c.addr, Producers: c.producers, InflightPerProd: c.inflight, Consumers: c.consumers,
		MessageBytes: c.size, Partitions: c.parts, Compression: c.compression, Payload: c.payload}
	r := &recorder{template: makeTemplate(c.payload, c.size)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := d.start(ctx, c, r); err != nil {
		return res, err
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			d.stop()
		}
	}
	defer stop()
	time.Sleep(c.warmup) // producers and consumers run; nothing to wait for
	cpu0, err := cpuSeconds(c.pids)
	if err != nil {
		return res, err
	}
	a0, d0, t0 := r.acked.Load(), r.delivered.Load(), time.Now()
	r.measuring.Store(true)
	time.Sleep(c.duration)
	a1, d1, t1 := r.acked.Load(), r.delivered.Load(), time.Now()
	cpu1, err := cpuSeconds(c.pids)
	if err != nil {
		return res, err
	}
	r.measuring.Store(false)
	stop()
	res.Seconds = t1.Sub(t0).Seconds()
	res.Acked, res.Delivered = a1-a0, d1-d0
	res.PublishPerSec, res.DeliverPerSec = float64(res.Acked)/res.Seconds, float64(res.Delivered)/res.Seconds
	res.E2EP50Ms, res.E2EP99Ms, res.E2ESamples = r.e2e.quantile(0.50), r.e2e.quantile(0.99), r.e2e.n.Load()
	res.BrokerCPUSecs = cpu1 - cpu0
	if res.Acked > 0 && len(c.pids) > 0 {
		res.CPUPerMsgUs = res.BrokerCPUSecs * 1e6 / float64(res.Acked)
	}
	res.Errors = r.failed.Load()
	r.errMu.Lock()
	if r.firstErr != nil {
		res.FirstError = r.firstErr.Error()
	}
	r.errMu.Unlock()
	return res, nil
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: not a count", name, v)
	}
	return n
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return d
}

func TestPeer(t *testing.T) {
	name := os.Getenv("KEEL_PEER_DRIVER")
	if name == "" {
		t.Skip("KEEL_PEER_DRIVER is not set (bench/sections/80-peers.sh sets it)")
	}
	c := &config{driver: name, addr: os.Getenv("KEEL_PEER_ADDR"), topic: os.Getenv("KEEL_PEER_TOPIC"),
		compression: cmp.Or(os.Getenv("KEEL_PEER_COMPRESSION"), "none"), payload: cmp.Or(os.Getenv("KEEL_PEER_PAYLOAD"), "random"),
		warmup: envDuration(t, "KEEL_PEER_WARMUP", 5*time.Second), duration: envDuration(t, "KEEL_PEER_DURATION", 20*time.Second),
		producers: envInt(t, "KEEL_PEER_PRODUCERS", 4), inflight: envInt(t, "KEEL_PEER_INFLIGHT", 256),
		consumers: envInt(t, "KEEL_PEER_CONSUMERS", 4), size: envInt(t, "KEEL_PEER_SIZE", 1024), parts: envInt(t, "KEEL_PEER_PARTITIONS", 8)}
	if c.size < 8 {
		t.Fatalf("KEEL_PEER_SIZE=%d: a body needs at least 8 bytes (the send time)", c.size)
	}
	for _, s := range strings.FieldsFunc(os.Getenv("KEEL_PEER_PIDS"), func(r rune) bool { return r == ',' || r == ' ' }) {
		pid, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("KEEL_PEER_PIDS: %q is not a process id", s)
		}
		c.pids = append(c.pids, pid)
	}
	d, err := drivers(name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := measure(c, d)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("%s", out)
	if p := os.Getenv("KEEL_PEER_OUT"); p != "" {
		if err := os.WriteFile(p, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if res.Acked == 0 || res.Delivered == 0 {
		t.Fatalf("nothing went through: %+v", res)
	}
}
