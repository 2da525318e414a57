package kafka

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kgo"
)

// startDiskNode is startNode on a real directory (fdatasync and all).
func startDiskNode(b *testing.B) string {
	dir := b.TempDir()
	scfg := store.DefaultConfig(dir)
	scfg.FS = vfs.OS{}
	scfg.FlushDiskType = store.SyncFlush
	st, err := store.Open(scfg)
	if err != nil {
		b.Fatal(err)
	}
	c, err := core.New(core.Config{DataDir: dir, FS: vfs.OS{}, AutoCreateTopicEnable: true, AutoCreateSubscriptionGroup: true,
		DefaultTopicQueueNums: 4, MaxMessageSize: 4 << 20}, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := New(Config{}, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	b.Cleanup(func() { srv.Close(); <-done; c.Close(); st.Close() })
	return ln.Addr().String()
}

// BenchmarkKgoProduce1KiB: franz-go producing 1 KiB records with
// acks=all (idempotent, batches as the client makes them) to 4
// partitions on a real disk under SYNC_FLUSH, then consuming them.
func BenchmarkKgoProduce1KiB(b *testing.B) {
	addr := startDiskNode(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.AllowAutoTopicCreation(),
		kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	value := make([]byte, 1024)
	ctx := context.Background()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "bench", Value: value}).FirstErr(); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	b.ResetTimer()
	errs := make(chan error, 1)
	for range b.N {
		cl.Produce(ctx, &kgo.Record{Topic: "bench", Value: value}, func(_ *kgo.Record, err error) {
			if err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics("bench"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cons.Close()
	start := time.Now()
	got := 0
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for got < b.N+1 && cctx.Err() == nil {
		got += len(cons.PollFetches(cctx).Records())
	}
	if got < b.N+1 {
		b.Fatalf("consumed %d of %d", got, b.N+1)
	}
	b.ReportMetric(float64(got)/time.Since(start).Seconds(), "consumed-records/s")
}
