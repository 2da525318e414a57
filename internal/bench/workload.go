package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Mode is what a workload does.
type Mode string

// Modes.
const (
	// ModeProduce: producers only; throughput and send latency.
	ModeProduce Mode = "produce"
	// ModeConsume: consumers only, from each queue's current minimum
	// offset (what is already stored); throughput.
	ModeConsume Mode = "consume"
	// ModeProduceConsume: both; end-to-end latency from the send timestamp
	// in each message body. With RateOfMax set, a max-rate search runs
	// first and producers are paced at that fraction of the found rate.
	ModeProduceConsume Mode = "produce-consume"
	// ModeBacklog: producers fill BacklogBytes at full speed, then
	// consumers drain the topics from offset 0; drain MB/s.
	ModeBacklog Mode = "backlog"
	// ModeMaxRate: a search that raises the producer rate step by step
	// (with consumers) until the achieved rate falls short of the target,
	// the consumers fall behind or the end-to-end p99 passes a limit.
	ModeMaxRate Mode = "max-rate"
)

// Workload describes one benchmark run. Load reads it from a flat YAML
// file (see yaml.go); keys are the json names below. Sizes take B, KiB,
// MiB, GiB suffixes; durations are Go durations ("30s", "1m").
type Workload struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Mode        Mode   `json:"mode"`
	// FlushDiskType is the broker flush type the workload is meant for
	// (SYNC_FLUSH, ASYNC_FLUSH or "" for any). The broker's own setting
	// is its config; the result records both.
	FlushDiskType string `json:"flushDiskType,omitempty"`

	Topics         int `json:"topics"`
	QueuesPerTopic int `json:"queuesPerTopic"`
	MessageSize    int `json:"messageSize"`

	Producers int `json:"producers"` // connections that send
	// ProducerRate is the total target rate over all producers in msg/s;
	// 0 means as fast as the in-flight window allows.
	ProducerRate float64 `json:"producerRate"`
	// InflightPerProducer is the number of requests each producer keeps in
	// flight on its connection (pipelining).
	InflightPerProducer int `json:"inflightPerProducer"`
	// SyncSenders, when set, replaces InflightPerProducer: that many
	// senders in all, each sending one request and waiting for its answer,
	// spread over the producers' connections.
	SyncSenders int `json:"syncSenders,omitempty"`
	// BatchSize > 1 sends SEND_BATCH_MESSAGE requests of that many
	// messages; 1 sends SEND_MESSAGE.
	BatchSize int `json:"batchSize"`

	Consumers     int `json:"consumers"`     // connections that pull; queues are split among them
	PullBatchSize int `json:"pullBatchSize"` // maxMsgNums per pull (default 32)

	Duration     time.Duration `json:"duration"`
	Warmup       time.Duration `json:"warmup"`
	BacklogBytes int64         `json:"backlogBytes,omitempty"` // backlog mode: payload bytes to fill

	// RateOfMax (0 < f <= 1), produce-consume only: search the max rate
	// first, then run paced at f times it.
	RateOfMax float64 `json:"rateOfMax,omitempty"`
	// Max-rate search: first target rate, factor per step, step length,
	// and the end-to-end p99 above which a step fails.
	SearchStartRate    float64       `json:"searchStartRate,omitempty"`
	SearchStepFactor   float64       `json:"searchStepFactor,omitempty"`
	SearchStepDuration time.Duration `json:"searchStepDuration,omitempty"`
	SearchP99Limit     time.Duration `json:"searchP99Limit,omitempty"`

	Targets Targets `json:"targets"`
}

// Targets are the figures a workload is expected to reach (zero = none).
// Latency targets apply to the primary latency of the run: end-to-end when
// it has consumers and producers, else the send latency.
type Targets struct {
	MsgsPerSec float64 `json:"msgsPerSec,omitempty"`
	MBPerSec   float64 `json:"mbPerSec,omitempty"` // payload MB/s (10^6 bytes)
	// Ratios of the payload throughput to the raw disk figures.
	SeqWriteRatio float64       `json:"seqWriteRatio,omitempty"`
	Sync1MiBRatio float64       `json:"sync1MiBRatio,omitempty"`
	P50           time.Duration `json:"p50,omitempty"`
	P99           time.Duration `json:"p99,omitempty"`
	P999          time.Duration `json:"p999,omitempty"`
	// P99Sync4KiBFactor: p99 at most this times the disk's 4 KiB fdatasync p99.
	P99Sync4KiBFactor float64 `json:"p99Sync4KiBFactor,omitempty"`
}

// ErrInvalidWorkload is wrapped by every validation error.
var ErrInvalidWorkload = errors.New("bench: invalid workload")

// Limits of a workload.
const (
	MaxTopics        = 10000
	MaxQueues        = 1024
	MinMessageSize   = 16 // timestamp and sequence
	MaxMessageSize   = 4 << 20
	MaxProducers     = 1024
	MaxInflight      = 4096
	MaxBatchSize     = 1024
	MaxBatchBytes    = 4 << 20 // the broker's default maxMessageSize applies to the whole batch
	DefaultPullBatch = 32
	MaxPullBatch     = 1024
)

// DefaultWorkload returns the defaults a file starts from.
func DefaultWorkload() Workload {
	return Workload{
		Mode: ModeProduce, Topics: 1, QueuesPerTopic: 8, MessageSize: 1024,
		Producers: 1, InflightPerProducer: 1, BatchSize: 1, Consumers: 0, PullBatchSize: DefaultPullBatch,
		Duration: 30 * time.Second, Warmup: 5 * time.Second,
		SearchStartRate: 5000, SearchStepFactor: 1.25, SearchStepDuration: 5 * time.Second,
		SearchP99Limit: 50 * time.Millisecond,
	}
}

// Load reads and validates a workload file. The name defaults to the file
// name without its extension.
func Load(path string) (Workload, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return Workload{}, fmt.Errorf("bench: %w", err)
	}
	w, err := Parse(string(src))
	if err != nil {
		return w, fmt.Errorf("%s: %w", path, err)
	}
	if w.Name == "" {
		w.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return w, nil
}

// Parse reads a workload from flat YAML over DefaultWorkload and validates it.
func Parse(src string) (Workload, error) {
	kvs, err := ParseFlatYAML(src)
	if err != nil {
		return Workload{}, err
	}
	w := DefaultWorkload()
	for _, kv := range kvs {
		set, ok := workloadKeys[kv.Key]
		if !ok {
			return w, fmt.Errorf("%w: line %d: unknown key %q", ErrInvalidWorkload, kv.Line, kv.Key)
		}
		if err := set(&w, kv.Value); err != nil {
			return w, fmt.Errorf("%w: line %d: %s: %v", ErrInvalidWorkload, kv.Line, kv.Key, err)
		}
	}
	return w, w.Validate()
}

type setter func(w *Workload, v string) error

func str(f func(*Workload) *string) setter {
	return func(w *Workload, v string) error { *f(w) = v; return nil }
}

func integer(f func(*Workload) *int) setter {
	return func(w *Workload, v string) error {
		n, err := strconv.Atoi(v)
		*f(w) = n
		return err
	}
}

func float(f func(*Workload) *float64) setter {
	return func(w *Workload, v string) error {
		n, err := strconv.ParseFloat(v, 64)
		*f(w) = n
		return err
	}
}

func duration(f func(*Workload) *time.Duration) setter {
	return func(w *Workload, v string) error {
		d, err := time.ParseDuration(v)
		*f(w) = d
		return err
	}
}

func size(f func(*Workload) *int64) setter {
	return func(w *Workload, v string) error {
		n, err := ParseSize(v)
		*f(w) = n
		return err
	}
}

func intSize(f func(*Workload) *int) setter {
	return func(w *Workload, v string) error {
		n, err := ParseSize(v)
		if err == nil && n > 1<<31-1 {
			err = errors.New("too large")
		}
		*f(w) = int(n)
		return err
	}
}

var workloadKeys = map[string]setter{
	"name":                str(func(w *Workload) *string { return &w.Name }),
	"description":         str(func(w *Workload) *string { return &w.Description }),
	"mode":                func(w *Workload, v string) error { w.Mode = Mode(v); return nil },
	"flushDiskType":       str(func(w *Workload) *string { return &w.FlushDiskType }),
	"topics":              integer(func(w *Workload) *int { return &w.Topics }),
	"queuesPerTopic":      integer(func(w *Workload) *int { return &w.QueuesPerTopic }),
	"messageSize":         intSize(func(w *Workload) *int { return &w.MessageSize }),
	"producers":           integer(func(w *Workload) *int { return &w.Producers }),
	"producerRate":        producerRate,
	"inflightPerProducer": integer(func(w *Workload) *int { return &w.InflightPerProducer }),
	"syncSenders":         integer(func(w *Workload) *int { return &w.SyncSenders }),
	"batchSize":           integer(func(w *Workload) *int { return &w.BatchSize }),
	"consumers":           integer(func(w *Workload) *int { return &w.Consumers }),
	"pullBatchSize":       integer(func(w *Workload) *int { return &w.PullBatchSize }),
	"duration":            duration(func(w *Workload) *time.Duration { return &w.Duration }),
	"warmup":              duration(func(w *Workload) *time.Duration { return &w.Warmup }),
	"backlogBytes":        size(func(w *Workload) *int64 { return &w.BacklogBytes }),
	"rateOfMax":           float(func(w *Workload) *float64 { return &w.RateOfMax }),
	"searchStartRate":     float(func(w *Workload) *float64 { return &w.SearchStartRate }),
	"searchStepFactor":    float(func(w *Workload) *float64 { return &w.SearchStepFactor }),
	"searchStepDuration":  duration(func(w *Workload) *time.Duration { return &w.SearchStepDuration }),
	"searchP99Limit":      duration(func(w *Workload) *time.Duration { return &w.SearchP99Limit }),

	"targetMsgsPerSec":        float(func(w *Workload) *float64 { return &w.Targets.MsgsPerSec }),
	"targetMBPerSec":          float(func(w *Workload) *float64 { return &w.Targets.MBPerSec }),
	"targetSeqWriteRatio":     float(func(w *Workload) *float64 { return &w.Targets.SeqWriteRatio }),
	"targetSync1MiBRatio":     float(func(w *Workload) *float64 { return &w.Targets.Sync1MiBRatio }),
	"targetP50":               duration(func(w *Workload) *time.Duration { return &w.Targets.P50 }),
	"targetP99":               duration(func(w *Workload) *time.Duration { return &w.Targets.P99 }),
	"targetP999":              duration(func(w *Workload) *time.Duration { return &w.Targets.P999 }),
	"targetP99Sync4KiBFactor": float(func(w *Workload) *float64 { return &w.Targets.P99Sync4KiBFactor }),
}

// producerRate accepts a number of msg/s, or "max" (= 0).
func producerRate(w *Workload, v string) error {
	if v == "max" {
		w.ProducerRate = 0
		return nil
	}
	n, err := strconv.ParseFloat(v, 64)
	w.ProducerRate = n
	return err
}

// ParseSize parses a byte count: an integer with an optional B, KiB, MiB,
// GiB or TiB suffix (spaces allowed before it).
func ParseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mul    int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}}
	num, mul := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mul = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mul
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a non-negative integer with an optional B, KiB, MiB, GiB or TiB suffix", s)
	}
	if n > (1<<62)/mul {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n * mul, nil
}

// Quick runs (keel bench --quick): each workload about QuickDuration.
const (
	QuickDuration     = 3 * time.Second
	QuickBacklogBytes = 256 << 20
)

// Shorten scales the workload down for a quick check of the machinery:
// duration d, warm-up at most d/3, search steps of d/3 and a backlog of
// at most QuickBacklogBytes (backlog phases keep their duration as a cap).
func (w *Workload) Shorten(d time.Duration) {
	if w.Mode != ModeBacklog {
		w.Duration = min(w.Duration, d)
	}
	w.Warmup = min(w.Warmup, d/3)
	w.SearchStepDuration = min(w.SearchStepDuration, d/3)
	if w.BacklogBytes > QuickBacklogBytes {
		w.BacklogBytes = QuickBacklogBytes
	}
}
