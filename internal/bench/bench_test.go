package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/testcluster"
)

// The send and pull paths over loopback against an in-process broker
// (ASYNC_FLUSH, so the figures are the CPU cost of the path, not the
// disk's). Allocations are the whole process's: client and broker.
//
//	go test -run '^$' -bench 'SendPath|PullPath' ./internal/bench/

const benchMessageSize = 1024

// benchTopic creates a topic with queues queues and returns a client to
// the broker and the topic's queues.
func benchTopic(b *testing.B, c *testcluster.Cluster, queues int) (*remoting.Client, []MessageQueue) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := fmt.Sprintf("bench-%s-%d", b.Name(), time.Now().UnixNano())
	topic = sanitizeTopic(topic)
	cl, err := remoting.Dial(ctx, c.BrokerAddr(), remoting.ClientConfig{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	if err := CreateTopic(ctx, cl, topic, queues); err != nil {
		b.Fatal(err)
	}
	qs := make([]MessageQueue, queues)
	for i := range qs {
		qs[i] = MessageQueue{Topic: topic, BrokerAddr: c.BrokerAddr(), QueueID: int32(i)}
	}
	return cl, qs
}

func sanitizeTopic(s string) string {
	out := []byte(s)
	for i, ch := range out {
		ok := ch == '-' || ch == '_' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z'
		if !ok {
			out[i] = '_'
		}
	}
	return string(out)
}

// sendAll sends with many requests in flight and fails the benchmark on
// any error; one op is one request.
func sendAll(b *testing.B, cl *remoting.Client, qs []MessageQueue, w *Workload, n int) {
	var next, failed atomic.Int64
	var firstErr atomic.Value
	done := make(chan struct{}, w.InflightPerProducer)
	for range w.InflightPerProducer {
		go func() {
			defer func() { done <- struct{}{} }()
			s := newSendBuffers(w, "bench-group")
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				resp, err := cl.Invoke(context.Background(), s.request(qs[i%int64(len(qs))], time.Now()))
				if err == nil && resp.Code != 0 {
					err = fmt.Errorf("code %d: %s", resp.Code, resp.Remark)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	for range w.InflightPerProducer {
		<-done
	}
	if failed.Load() > 0 {
		b.Fatalf("%d sends failed, first: %v", failed.Load(), firstErr.Load())
	}
}

func BenchmarkSendPath(b *testing.B) {
	c := startCluster(b, store.AsyncFlush)
	for _, batch := range []int{1, 32} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			cl, qs := benchTopic(b, c, 8)
			w := DefaultWorkload()
			w.MessageSize, w.BatchSize, w.InflightPerProducer = benchMessageSize, batch, 64
			b.SetBytes(int64(batch * benchMessageSize))
			b.ReportAllocs()
			b.ResetTimer()
			sendAll(b, cl, qs, &w, b.N)
		})
	}
}

// pullPrefill is the number of messages stored before the pulls.
const pullPrefill = 32 * 1024

func BenchmarkPullPath(b *testing.B) {
	c := startCluster(b, store.AsyncFlush)
	cl, qs := benchTopic(b, c, 1)
	w := DefaultWorkload()
	w.MessageSize, w.BatchSize, w.InflightPerProducer = benchMessageSize, 32, 16
	sendAll(b, cl, qs, &w, pullPrefill/32)
	waitDispatched(b, c, qs[0], pullPrefill)
	for _, n := range []int{1, 32} {
		b.Run("msgs="+strconv.Itoa(n), func(b *testing.B) {
			ext := map[string]string{
				"consumerGroup": "bench-pull", "topic": qs[0].Topic, "queueId": "0", "maxMsgNums": strconv.Itoa(n),
				"sysFlag": strconv.Itoa(remoting.PullFlagSubscription), "commitOffset": "0", "suspendTimeoutMillis": "0",
				"subscription": "*", "subVersion": "0", "expressionType": "TAG",
			}
			b.SetBytes(int64(n * benchMessageSize))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ext["queueOffset"] = strconv.Itoa(i * n % (pullPrefill - n))
				resp, err := cl.Invoke(context.Background(), remoting.NewRequest(remoting.ReqPullMessage, ext, nil))
				if err != nil || resp.Code != 0 || len(resp.Body) < n*benchMessageSize {
					b.Fatalf("pull: %v %v", err, resp)
				}
			}
		})
	}
}

// waitDispatched waits until q's ConsumeQueue holds n entries.
func waitDispatched(b *testing.B, c *testcluster.Cluster, q MessageQueue, n int64) {
	b.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for c.Store().MaxOffset(q.Topic, q.QueueID) < n {
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d messages dispatched", c.Store().MaxOffset(q.Topic, q.QueueID), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
