package peers

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Backlog is what TestKafkaBacklog writes (JSON).
type Backlog struct {
	Partitions    int     `json:"partitions"`
	Compression   string  `json:"compression"`
	Payload       string  `json:"payload"`
	Messages      int64   `json:"messages"`
	PayloadBytes  int64   `json:"payload_bytes"`
	ProduceSecs   float64 `json:"produce_seconds"`
	CacheDropped  bool    `json:"cache_dropped"`
	ConsumeSecs   float64 `json:"consume_seconds"`
	ConsumeMsgs   float64 `json:"consume_msgs_per_sec"`
	ConsumeMBps   float64 `json:"consume_payload_mb_per_sec"` // 10^6 payload bytes per second
	BrokerCPUSecs float64 `json:"consume_broker_cpu_seconds"`
	CPUPerMsgUs   float64 `json:"consume_broker_cpu_us_per_msg"`
	Errors        int64   `json:"errors"`
}

// dropCaches writes back dirty pages and drops the page cache (root only),
// so that what is read next comes from the disk.
func dropCaches() error {
	syscall.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// TestKafkaBacklog, run when KEEL_PEER_BACKLOG_BYTES is set: franz-go
// producers (acks=all, KEEL_PEER_COMPRESSION, KEEL_PEER_PAYLOAD) fill a
// new topic of KEEL_PEER_PARTITIONS partitions with that many payload
// bytes and no consumer; then the page cache is dropped
// (KEEL_PEER_DROP_CACHES=0 keeps it) and KEEL_PEER_CONSUMERS consumers,
// splitting the partitions, read the whole backlog from the start.
func TestKafkaBacklog(t *testing.T) {
	want := int64(envInt(t, "KEEL_PEER_BACKLOG_BYTES", 0))
	if want == 0 {
		t.Skip("KEEL_PEER_BACKLOG_BYTES is not set (bench/sections/45-kafka-matrix.sh sets it)")
	}
	addr := os.Getenv("KEEL_PEER_ADDR")
	var pids []int
	if pid := envInt(t, "KEEL_PEER_PIDS", 0); pid > 0 {
		pids = []int{pid}
	}
	res := Backlog{Partitions: envInt(t, "KEEL_PEER_PARTITIONS", 8), Compression: cmp.Or(os.Getenv("KEEL_PEER_COMPRESSION"), "none"),
		Payload: cmp.Or(os.Getenv("KEEL_PEER_PAYLOAD"), "random")}
	size, producers, consumers := envInt(t, "KEEL_PEER_SIZE", 1024), envInt(t, "KEEL_PEER_PRODUCERS", 4), envInt(t, "KEEL_PEER_CONSUMERS", 4)
	codec, err := compression(res.Compression)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	topic := fmt.Sprintf("peer-backlog-%d", time.Now().UnixNano())
	admin, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, int32(res.Partitions), 1, nil, topic); err != nil {
		t.Fatal(err)
	}

	// Fill.
	r := &recorder{template: makeTemplate(res.Payload, size)}
	var taken atomic.Int64
	n := want / int64(size)
	start := time.Now()
	var wg sync.WaitGroup
	for range producers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic),
			kgo.ProducerBatchCompression(codec))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for taken.Add(1) <= n {
				cl.Produce(ctx, &kgo.Record{Value: r.body()}, func(_ *kgo.Record, err error) {
					if err != nil {
						r.fail(err)
					} else {
						r.ack(1)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				r.fail(err)
			}
		}()
	}
	wg.Wait()
	res.ProduceSecs = time.Since(start).Seconds()
	res.Messages, res.PayloadBytes = r.acked.Load(), r.acked.Load()*int64(size)
	if r.failed.Load() > 0 {
		t.Fatalf("%d sends failed: %v", r.failed.Load(), r.firstErr)
	}

	if os.Getenv("KEEL_PEER_DROP_CACHES") != "0" {
		if err := dropCaches(); err != nil {
			t.Fatalf("drop the page cache: %v (KEEL_PEER_DROP_CACHES=0 reads it warm)", err)
		}
		res.CacheDropped = true
	}

	// Read it all back.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cpu0, err := cpuSeconds(pids)
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	var (
		errs atomic.Int64
		end  time.Time
		once sync.Once
	)
	// A consumer whose partitions are read would wait in PollFetches: the
	// last record of the backlog ends the read for all.
	got := func(rec *kgo.Record) {
		r.deliver(rec.Value)
		if r.delivered.Load() >= res.Messages {
			once.Do(func() { end = time.Now(); cancel() })
		}
	}
	for i := range min(consumers, res.Partitions) {
		parts := map[int32]kgo.Offset{}
		for p := i; p < res.Partitions; p += consumers {
			parts[int32(p)] = kgo.NewOffset().AtStart()
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer cl.Close()
			for cctx.Err() == nil {
				fs := cl.PollFetches(cctx)
				fs.EachError(func(_ string, _ int32, err error) {
					if cctx.Err() == nil {
						errs.Add(1)
					}
				})
				fs.EachRecord(got)
			}
		}()
	}
	wg.Wait()
	res.ConsumeSecs = end.Sub(start).Seconds()
	cpu1, err := cpuSeconds(pids)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.delivered.Load(); got < res.Messages {
		t.Fatalf("consumed %d of %d", got, res.Messages)
	}
	res.Errors = errs.Load()
	res.ConsumeMsgs = float64(res.Messages) / res.ConsumeSecs
	res.ConsumeMBps = float64(res.PayloadBytes) / res.ConsumeSecs / 1e6
	res.BrokerCPUSecs = cpu1 - cpu0
	if len(pids) > 0 {
		res.CPUPerMsgUs = res.BrokerCPUSecs * 1e6 / float64(res.Messages)
	}
	out, _ := json.MarshalIndent(res, "", "  ")
	t.Logf("%s", out)
	if p := os.Getenv("KEEL_PEER_OUT"); p != "" {
		if err := os.WriteFile(p, append(out, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
