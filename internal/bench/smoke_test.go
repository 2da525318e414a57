package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/testcluster"
)

// smokeWorkload is small and short: it checks the machinery, not speed.
func smokeWorkload(mode Mode) Workload {
	w := DefaultWorkload()
	w.Name, w.Mode = "smoke", mode
	w.Topics, w.QueuesPerTopic, w.MessageSize = 2, 2, 256
	w.Producers, w.InflightPerProducer, w.Consumers = 2, 4, 2
	w.ProducerRate = 2000
	w.Warmup, w.Duration = 200*time.Millisecond, time.Second
	return w
}

func runSmoke(t *testing.T, c *testcluster.Cluster, w Workload) (*Result, string) {
	t.Helper()
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Run(ctx, w, Options{NamesrvAddr: c.NamesrvAddr(), Progress: &progress, ProgressInterval: 250 * time.Millisecond})
	if err != nil {
		t.Fatalf("Run: %v\nprogress:\n%s", err, progress.String())
	}
	return res, progress.String()
}

func checkOrdered(t *testing.T, what string, s Summary) {
	t.Helper()
	if s.Count == 0 {
		t.Fatalf("%s: no latencies recorded", what)
	}
	q := []time.Duration{s.P50, s.P90, s.P99, s.P999, s.Max}
	for i := 1; i < len(q); i++ {
		if q[i] < q[i-1] || q[0] <= 0 {
			t.Fatalf("%s: quantiles not ordered: %+v", what, s)
		}
	}
}

func TestSmokeProduceConsume(t *testing.T) {
	c := startCluster(t, store.AsyncFlush)
	for _, batch := range []int{1, 8} {
		w := smokeWorkload(ModeProduceConsume)
		w.BatchSize = batch
		res, progress := runSmoke(t, c, w)
		if res.TotalSent == 0 || res.TotalSent != res.TotalReceived {
			t.Fatalf("batch %d: sent %d, received %d", batch, res.TotalSent, res.TotalReceived)
		}
		if res.TotalSendErrors+res.TotalRecvErrors+res.OutOfOrder != 0 {
			t.Fatalf("batch %d: errors %d/%d, out of order %d: %v", batch,
				res.TotalSendErrors, res.TotalRecvErrors, res.OutOfOrder, res.Errors)
		}
		checkOrdered(t, "send", res.Send.Latency)
		checkOrdered(t, "end-to-end", res.Receive.Latency)
		if !strings.Contains(progress, "recv") || !strings.Contains(progress, "send") {
			t.Fatalf("progress lines missing:\n%s", progress)
		}
	}
}

func TestSmokeSyncFlushProduce(t *testing.T) {
	c := startCluster(t, store.SyncFlush)
	w := smokeWorkload(ModeProduce)
	w.Consumers, w.ProducerRate, w.InflightPerProducer = 0, 0, 1
	w.SyncSenders = 4
	res, _ := runSmoke(t, c, w)
	if res.Send.Messages == 0 || res.TotalSendErrors != 0 {
		t.Fatalf("sent %d, errors %d: %v", res.Send.Messages, res.TotalSendErrors, res.Errors)
	}
	checkOrdered(t, "send", res.Send.Latency)
}

func TestSmokeBacklogDrain(t *testing.T) {
	c := startCluster(t, store.AsyncFlush)
	w := smokeWorkload(ModeBacklog)
	w.ProducerRate, w.BatchSize, w.BacklogBytes, w.Duration = 0, 16, 2<<20, 30*time.Second
	res, _ := runSmoke(t, c, w)
	if res.Send.Bytes < 2<<20 {
		t.Fatalf("filled %d bytes, want >= %d", res.Send.Bytes, 2<<20)
	}
	if res.TotalReceived != res.TotalSent || res.Receive.Messages != res.TotalSent {
		t.Fatalf("sent %d, received %d (drain window %d)", res.TotalSent, res.TotalReceived, res.Receive.Messages)
	}
	if res.OutOfOrder != 0 || res.TotalRecvErrors != 0 {
		t.Fatalf("out of order %d, receive errors %d: %v", res.OutOfOrder, res.TotalRecvErrors, res.Errors)
	}
}

func TestSmokeMaxRate(t *testing.T) {
	c := startCluster(t, store.AsyncFlush)
	w := smokeWorkload(ModeMaxRate)
	w.ProducerRate = 0
	w.SearchStartRate, w.SearchStepFactor, w.SearchStepDuration = 500, 2, 300*time.Millisecond
	w.SearchP99Limit = time.Second
	w.Warmup = 0
	res, _ := runSmoke(t, c, w)
	if len(res.SearchSteps) == 0 || res.MaxRate < 500 {
		t.Fatalf("search steps %+v, max rate %v", res.SearchSteps, res.MaxRate)
	}
	if last := res.SearchSteps[len(res.SearchSteps)-1]; last.OK && len(res.SearchSteps) < maxSearchSteps {
		t.Fatalf("the search stopped on a step that held: %+v", last)
	}
}
