// Command producer is the classic Kafka producer, written with franz-go
// (github.com/twmb/franz-go/pkg/kgo) as for any Kafka cluster: acks=all,
// and every record sent asynchronously with a callback that reports the
// partition and offset it was stored at, or why it failed.
//
//	go run ./cmd/keel serve                 # in one terminal (Kafka on 127.0.0.1:9092)
//	go run ./examples/kafka/producer        # in another
//
// acks=all is answered once the broker has the batch durably (with Keel's
// default flushDiskType=SYNC_FLUSH, after the fdatasync that covers it) and
// it can be fetched. Records with the same key go to the same partition,
// in order.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("b", cmp.Or(os.Getenv("KAFKA_BROKERS"), "127.0.0.1:9092"), "bootstrap servers, comma-separated ($KAFKA_BROKERS when set)")
	topic := flag.String("topic", "example-orders", "topic")
	count := flag.Int("count", 10, "number of records to send")
	flag.Parse()
	if err := run(strings.Split(*brokers, ","), *topic, *count); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(brokers []string, topic string, count int) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()), // acks=all
		kgo.DefaultProduceTopic(topic),
		kgo.AllowAutoTopicCreation(),
		kgo.RecordDeliveryTimeout(30*time.Second),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	var wg sync.WaitGroup
	var failed atomic.Int64
	runID := time.Now().Unix()
	for i := range count {
		key := fmt.Sprintf("order-%d", i%3) // three keys: three ordered streams
		r := &kgo.Record{Key: []byte(key), Value: fmt.Appendf(nil, "order event %d of run %d", i, runID)}
		wg.Add(1)
		cl.Produce(context.Background(), r, func(r *kgo.Record, err error) {
			defer wg.Done()
			if err != nil {
				failed.Add(1)
				log.Printf("send key=%s failed: %v", r.Key, err)
				return
			}
			log.Printf("sent key=%s: partition=%d offset=%d", r.Key, r.Partition, r.Offset)
		})
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d of %d records failed", n, count)
	}
	log.Printf("done: %d records acknowledged (acks=all) on %s", count, topic)
	return nil
}
