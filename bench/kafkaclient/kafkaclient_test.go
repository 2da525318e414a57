// Package kafkaclient drives a running Keel's Kafka listener with franz-go
// for bench/sections/40-kafka.sh: producers send 1 KiB records with
// acks=all (idempotent, batches as the client makes them, uncompressed,
// random payload) for a while,
// then one consumer reads them all back. It reports messages per second
// and the broker's CPU time per message (from /proc/PID/stat of the
// broker process) as JSON. A test, since it is a client of the broker,
// run only when KEEL_BENCH_KAFKA names the listener.
//
//	KEEL_BENCH_KAFKA=127.0.0.1:9092 KEEL_BENCH_PID=1234 KEEL_BENCH_OUT=kafka.json \
//	  go test ./bench/kafkaclient -run TestKafkaClient -v
package kafkaclient

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Phase is one side of the run.
type Phase struct {
	Messages      int64   `json:"messages"`
	Seconds       float64 `json:"seconds"`
	MsgsPerSec    float64 `json:"msgs_per_sec"`
	MBPerSec      float64 `json:"mb_per_sec"` // 10^6 payload bytes per second
	BrokerCPUSecs float64 `json:"broker_cpu_seconds"`
	CPUPerMsgUs   float64 `json:"broker_cpu_us_per_msg"`
	Errors        int64   `json:"errors"`
}

// Result is what the run writes.
type Result struct {
	Producers   int   `json:"producers"`
	Partitions  int   `json:"partitions"`
	RecordBytes int   `json:"record_bytes"`
	Produce     Phase `json:"produce"`
	Consume     Phase `json:"consume"`
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// cpuSeconds is the user+system CPU time of process pid so far (0 when no
// pid is given).
func cpuSeconds(t *testing.T, pid int) float64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // after "pid (comm) "
	ut, _ := strconv.ParseFloat(fields[11], 64)                   // utime, field 14
	st, _ := strconv.ParseFloat(fields[12], 64)                   // stime, field 15
	return (ut + st) / 100                                        // USER_HZ, 100 on Linux
}

func (p *Phase) finish(elapsed time.Duration, cpu float64, size int) {
	p.Seconds = elapsed.Seconds()
	p.MsgsPerSec = float64(p.Messages) / p.Seconds
	p.MBPerSec = p.MsgsPerSec * float64(size) / 1e6
	p.BrokerCPUSecs = cpu
	if p.Messages > 0 {
		p.CPUPerMsgUs = cpu * 1e6 / float64(p.Messages)
	}
}

func TestKafkaClient(t *testing.T) {
	seed := os.Getenv("KEEL_BENCH_KAFKA")
	if seed == "" {
		t.Skip("KEEL_BENCH_KAFKA is not set")
	}
	pid := envInt(t, "KEEL_BENCH_PID", 0)
	secs := envInt(t, "KEEL_BENCH_SECONDS", 10)
	res := Result{Producers: envInt(t, "KEEL_BENCH_PRODUCERS", 4), Partitions: envInt(t, "KEEL_BENCH_PARTITIONS", 8), RecordBytes: 1024}
	topic := fmt.Sprintf("kafka-bench-%d", time.Now().UnixNano())
	ctx := context.Background()

	admin, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, int32(res.Partitions), 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	// Produce: each producer keeps its client's buffer full until the
	// time is up; a record counts once acknowledged.
	value := make([]byte, res.RecordBytes)
	rand.Read(value) // incompressible; and the producers do not compress
	var acked, failed atomic.Int64
	cpu0 := cpuSeconds(t, pid)
	start := time.Now()
	deadline := start.Add(time.Duration(secs) * time.Second)
	var wg sync.WaitGroup
	for range res.Producers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic),
			kgo.ProducerBatchCompression(kgo.NoCompression()))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for time.Now().Before(deadline) {
				cl.Produce(ctx, &kgo.Record{Value: value}, func(_ *kgo.Record, err error) {
					if err != nil {
						failed.Add(1)
					} else {
						acked.Add(1)
					}
				})
			}
			cl.Flush(ctx)
		}()
	}
	wg.Wait()
	res.Produce.Messages, res.Produce.Errors = acked.Load(), failed.Load()
	res.Produce.finish(time.Since(start), cpuSeconds(t, pid)-cpu0, res.RecordBytes)

	// Consume everything back with one consumer.
	cons, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	cpu0 = cpuSeconds(t, pid)
	start = time.Now()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var got int64
	for got < res.Produce.Messages {
		fs := cons.PollFetches(cctx)
		if cctx.Err() != nil {
			t.Fatalf("consumed %d of %d", got, res.Produce.Messages)
		}
		fs.EachError(func(_ string, _ int32, err error) { res.Consume.Errors++ })
		got += int64(fs.NumRecords())
	}
	res.Consume.Messages = got
	res.Consume.finish(time.Since(start), cpuSeconds(t, pid)-cpu0, res.RecordBytes)

	out, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("%s", out)
	if path := os.Getenv("KEEL_BENCH_OUT"); path != "" {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
