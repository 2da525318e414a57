package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkKgoTxnProduce1KiB: franz-go producing 1 KiB records in
// transactions of 100 (begin, 100 records to 4 partitions, flush,
// commit) on a real disk under SYNC_FLUSH; beside BenchmarkKgoProduce1KiB
// (the same records with acks=all and no transaction), the cost of the
// coordinator's records, the markers and the waits of EndTxn.
func BenchmarkKgoTxnProduce1KiB(b *testing.B) {
	const perTxn = 100
	addr := startDiskNode(b)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.TransactionalID("bench-tx"),
		kgo.ProducerLinger(time.Millisecond), kgo.ProducerBatchCompression(kgo.NoCompression()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	value := make([]byte, 1024)
	ctx := context.Background()
	txn := func(n int) {
		if err := cl.BeginTransaction(); err != nil {
			b.Fatal(err)
		}
		errs := make(chan error, 1)
		for range n {
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
		select {
		case err := <-errs:
			b.Fatal(err)
		default:
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			b.Fatal(err)
		}
	}
	txn(1) // the topic created, the producer id given
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	b.ResetTimer()
	start, txns := time.Now(), 0
	for left := b.N; left > 0; left -= perTxn {
		txn(min(left, perTxn))
		txns++
	}
	b.StopTimer()
	b.ReportMetric(float64(txns)/time.Since(start).Seconds(), "txns/s")
}
