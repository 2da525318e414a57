package peers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// kafkaDriver: franz-go producers (acks=all, idempotent, the client's own
// batching, at most inflight records buffered per producer) into a new
// topic of parts partitions; consumers split the partitions among them,
// each reading its own from the start.
type kafkaDriver struct {
	wg      sync.WaitGroup
	clients []*kgo.Client
}

func compression(name string) (kgo.CompressionCodec, error) {
	switch name {
	case "", "none":
		return kgo.NoCompression(), nil
	case "snappy":
		return kgo.SnappyCompression(), nil
	case "lz4":
		return kgo.Lz4Compression(), nil
	case "zstd":
		return kgo.ZstdCompression(), nil
	}
	return kgo.CompressionCodec{}, fmt.Errorf("compression %q: none, snappy, lz4 or zstd", name)
}

func (k *kafkaDriver) start(ctx context.Context, c *config, r *recorder) error {
	codec, err := compression(c.compression)
	if err != nil {
		return err
	}
	topic := fmt.Sprintf("peer-bench-%d", time.Now().UnixNano())
	admin, err := kgo.NewClient(kgo.SeedBrokers(c.addr))
	if err != nil {
		return err
	}
	defer admin.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(admin).CreateTopic(cctx, int32(c.parts), 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("create topic: %w", err)
	}
	for range c.producers {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.addr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.DefaultProduceTopic(topic),
			kgo.MaxBufferedRecords(c.inflight), kgo.ProducerBatchCompression(codec))
		if err != nil {
			return err
		}
		k.clients = append(k.clients, cl)
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			for ctx.Err() == nil {
				// Produce blocks while inflight records are unacknowledged.
				cl.Produce(ctx, &kgo.Record{Value: r.body()}, func(_ *kgo.Record, err error) {
					switch {
					case err == nil:
						r.ack(1)
					case ctx.Err() == nil:
						r.fail(err)
					}
				})
			}
		}()
	}
	for i := range min(c.consumers, c.parts) {
		parts := map[int32]kgo.Offset{}
		for p := i; p < c.parts; p += c.consumers {
			parts[int32(p)] = kgo.NewOffset().AtStart()
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: parts}),
			kgo.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			return err
		}
		k.clients = append(k.clients, cl)
		k.wg.Add(1)
		go func() {
			defer k.wg.Done()
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				fs.EachError(func(_ string, _ int32, err error) {
					if ctx.Err() == nil {
						r.fail(fmt.Errorf("fetch: %w", err))
					}
				})
				fs.EachRecord(func(rec *kgo.Record) { r.deliver(rec.Value) })
			}
		}()
	}
	return nil
}

func (k *kafkaDriver) stop() {
	k.wg.Wait()
	for _, cl := range k.clients {
		cl.Close()
	}
}
