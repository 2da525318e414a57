package official

import (
	"context"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/testcluster"
)

// TestOfficialClientSmoke runs the driver for a moment against an
// in-process NameServer and broker.
func TestOfficialClientSmoke(t *testing.T) {
	if raceEnabled {
		t.Skip("the official Go client races internally (see internal/broker/e2e)")
	}
	ns := startCluster(t)
	for _, sync := range []int{0, 2} {
		w := bench.DefaultWorkload()
		w.Name, w.QueuesPerTopic, w.MessageSize, w.Producers, w.InflightPerProducer = "official-smoke", 2, 256, 2, 4
		w.SyncSenders, w.BatchSize, w.ProducerRate = sync, 1+sync, 400
		if sync > 0 {
			w.InflightPerProducer = 1
		}
		w.Warmup, w.Duration = 200*time.Millisecond, 700*time.Millisecond
		res, err := drive(context.Background(), w, ns, "ASYNC_FLUSH")
		if err != nil {
			t.Fatal(err)
		}
		l := res.Send.Latency
		if res.Send.Messages == 0 || res.TotalSendErrors != 0 || l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.Max {
			t.Fatalf("sync senders %d: %+v, errors %v", sync, res.Send, res.Errors)
		}
	}
}

// startCluster starts a NameServer and a broker on loopback ports and
// returns the NameServer address.
func startCluster(t *testing.T) string {
	t.Helper()
	c := testcluster.Start(t, testcluster.WithFlush(store.AsyncFlush),
		testcluster.WithStoreConfig(func(c *store.Config) { c.CommitLogSegmentBytes = 64 << 20 }))
	return c.NamesrvAddr()
}

// TestOfficialClientSmokePush runs the produce-consume driver for a
// moment: every message sent reaches the push consumers.
func TestOfficialClientSmokePush(t *testing.T) {
	if raceEnabled {
		t.Skip("the official Go client races internally (see internal/broker/e2e)")
	}
	ns := startCluster(t)
	w := bench.DefaultWorkload()
	w.Name, w.Mode, w.QueuesPerTopic, w.MessageSize = "official-smoke-push", bench.ModeProduceConsume, 2, 256
	w.Producers, w.InflightPerProducer, w.Consumers, w.ProducerRate = 2, 4, 2, 400
	w.Warmup, w.Duration = 200*time.Millisecond, 700*time.Millisecond
	res, err := drive(context.Background(), w, ns, "ASYNC_FLUSH")
	if err != nil {
		t.Fatal(err)
	}
	if res.TotalSendErrors != 0 || res.TotalSent == 0 || res.TotalReceived < res.TotalSent {
		t.Fatalf("sent %d (errors %d), received %d: %v", res.TotalSent, res.TotalSendErrors, res.TotalReceived, res.Errors)
	}
	if l := res.Receive.Latency; res.Receive.Messages == 0 || l.P50 <= 0 || l.P50 > l.P99 {
		t.Fatalf("receive %+v", res.Receive)
	}
}
