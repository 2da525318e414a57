package official

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/keelmq/keel/internal/bench"
)

// receivers are the push consumers of a produce-consume workload.
type receivers struct {
	cs              []rocketmq.PushConsumer
	received, bytes atomic.Uint64
	unstamped       atomic.Uint64 // bodies without the send stamp (not this run's)
	lat             bench.Recorder
}

// startConsumers starts w.Consumers push consumers of one group, each
// subscribed to every topic from its first offset.
func startConsumers(w bench.Workload, ns string, topics []string) (*receivers, error) {
	r := &receivers{}
	for i := range max(w.Consumers, 1) {
		c, err := consumer.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
			consumer.WithGroupName("keel-bench-official-cg"), consumer.WithInstance(fmt.Sprintf("bench-c-%d-%d", os.Getpid(), i)),
			consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
		if err != nil {
			r.shutdown()
			return nil, err
		}
		for _, t := range topics {
			if err := c.Subscribe(t, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}, r.consume); err != nil {
				r.shutdown()
				return nil, err
			}
		}
		if err := c.Start(); err != nil {
			r.shutdown()
			return nil, err
		}
		r.cs = append(r.cs, c)
	}
	return r, nil
}

// stampBytes and bodyMagic mirror the body layout of bench.StampBody.
const (
	stampBytes = 16
	bodyMagic  = "keelbnch"
)

func (r *receivers) consume(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	now := time.Now().UnixNano()
	for _, m := range ms {
		b := m.Body
		if len(b) < stampBytes || string(b[8:stampBytes]) != bodyMagic {
			r.unstamped.Add(1)
			continue
		}
		r.lat.Record(time.Duration(now - int64(binary.BigEndian.Uint64(b))))
		r.received.Add(1)
		r.bytes.Add(uint64(len(b)))
	}
	return consumer.ConsumeSuccess, nil
}

type rsnap struct {
	at              time.Time
	received, bytes uint64
	lat             *bench.Histogram
}

// snap is nil-safe: a produce workload has no receivers.
func (r *receivers) snap() rsnap {
	if r == nil {
		return rsnap{}
	}
	return rsnap{at: time.Now(), received: r.received.Load(), bytes: r.bytes.Load(), lat: r.lat.Snapshot()}
}

func (r *receivers) throughput(base, end rsnap) *bench.Throughput {
	d := end.at.Sub(base.at).Seconds()
	return &bench.Throughput{Messages: end.received - base.received, Bytes: end.bytes - base.bytes, Seconds: d,
		MsgsPerSec: float64(end.received-base.received) / d, MBPerSec: float64(end.bytes-base.bytes) / d / 1e6,
		Latency: end.lat.Sub(base.lat).Summarize()}
}

// drainTimeout bounds how long the producers' last messages may take to
// reach the consumers.
const drainTimeout = 2 * time.Minute

// drain waits until the consumers have received n messages, at most d.
func (r *receivers) drain(n uint64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for r.received.Load() < n {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

func (r *receivers) shutdown() {
	for _, c := range r.cs {
		_ = c.Shutdown()
	}
	r.cs = nil
}
