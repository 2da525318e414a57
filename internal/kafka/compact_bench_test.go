package kafka

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startDiskCompactNode is a node on a real directory (fdatasync and all)
// whose door keeps compacted copies there and cleans only when asked.
func startDiskCompactNode(b *testing.B) (*Server, *store.Store, string, string) {
	dir := b.TempDir()
	scfg := store.DefaultConfig(dir)
	scfg.FS, scfg.FlushDiskType = vfs.OS{}, store.SyncFlush
	st, err := store.Open(scfg)
	if err != nil {
		b.Fatal(err)
	}
	c, err := core.New(core.Config{DataDir: dir, FS: vfs.OS{}, AutoCreateTopicEnable: true, AutoCreateSubscriptionGroup: true,
		DefaultTopicQueueNums: 1, MaxMessageSize: 4 << 20}, st, nil)
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := New(Config{DataDir: dir, FS: vfs.OS{}, CompactionInterval: time.Hour}, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	b.Cleanup(func() { srv.Close(); <-done; c.Close(); st.Close() })
	return srv, st, ln.Addr().String(), dir
}

func createBenchTopic(b *testing.B, addr, topic string, configs map[string]*string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	if r, err := kadm.NewClient(cl).CreateTopic(context.Background(), 1, 1, configs, topic); err != nil || r.Err != nil {
		b.Fatal(err, r.Err)
	}
}

// BenchmarkCompactClean: one cleaning pass of a partition of 100,000
// records of 100-byte values over 1,000 keys (100 versions each, batches
// of 100 records as franz-go makes them, uncompressed), on a real disk
// under SYNC_FLUSH, from no copy to a copy of the 1,000 latest records
// (fdatasync and rename included). Reported: records cleaned per second
// and the bytes the pass wrote.
func BenchmarkCompactClean(b *testing.B) {
	srv, _, addr, dir := startDiskCompactNode(b)
	createBenchTopic(b, addr, "bench.compact", map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ProducerBatchCompression(kgo.NoCompression()), kgo.ProducerLinger(time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	const records, keys = 100_000, 1000
	value := make([]byte, 100)
	ctx := context.Background()
	for i := 0; i < records; i += 100 {
		rs := make([]*kgo.Record, 0, 100)
		for j := i; j < i+100; j++ {
			rs = append(rs, &kgo.Record{Topic: "bench.compact", Key: fmt.Appendf(nil, "key-%04d", j%keys), Value: value})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	x := srv.compact
	var written int64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		x.dropTopic("bench.compact") // back to no copy: the pass cleans the whole partition again
		if err := x.clean("bench.compact", 0); err != nil {
			b.Fatal(err)
		}
		p := x.lookup(queueKey{"bench.compact", 0})
		if p == nil || p.cp == nil || p.cp.cleaned != records {
			b.Fatal("the pass did not clean the partition")
		}
		written = copyHeaderBytes + p.cp.bytes
	}
	b.StopTimer()
	b.ReportMetric(float64(records)*float64(b.N)/b.Elapsed().Seconds(), "records-cleaned/s")
	b.ReportMetric(float64(written), "bytes-written/pass")
	names, _ := os.ReadDir(filepath.Join(dir, compactDir))
	if len(names) != 1 {
		b.Fatalf("%d files in the copies' directory, want 1", len(names))
	}
}

// BenchmarkKgoProduceKeyed: franz-go producing keyed 1 KiB records with
// acks=all to one partition on a real disk under SYNC_FLUSH, to a plain
// topic and to a compacted one (each batch decompressed to check its keys:
// lz4 here, as a client compresses).
func BenchmarkKgoProduceKeyed(b *testing.B) {
	for _, policy := range []string{"delete", "compact"} {
		b.Run(policy, func(b *testing.B) {
			_, _, addr, _ := startDiskCompactNode(b)
			topic := "bench." + policy
			createBenchTopic(b, addr, topic, map[string]*string{"cleanup.policy": kmsg.StringPtr(policy)})
			cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.AllISRAcks()),
				kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			value := make([]byte, 1024)
			for i := range value {
				value[i] = byte(i * 7)
			}
			ctx := context.Background()
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			b.ResetTimer()
			errs := make(chan error, 1)
			for i := range b.N {
				cl.Produce(ctx, &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key-%d", i%10000), Value: value}, func(_ *kgo.Record, err error) {
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
		})
	}
}
