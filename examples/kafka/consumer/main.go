// Command consumer is a Kafka consumer-group member, written with franz-go
// (github.com/twmb/franz-go/pkg/kgo) as for any Kafka cluster: it joins
// the group, is assigned partitions (run it twice and they are shared; stop
// one and the other takes them over), prints each record and commits what
// it processed, so the group resumes after it next time.
//
//	go run ./cmd/keel serve                  # in one terminal
//	go run ./examples/kafka/producer         # in another
//	go run ./examples/kafka/consumer         # then this
//
// Offsets are committed explicitly after the records are processed
// (at-least-once); the broker answers a commit once it is on disk. A new
// group starts at the earliest record.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	brokers := flag.String("b", cmp.Or(os.Getenv("KAFKA_BROKERS"), "127.0.0.1:9092"), "bootstrap servers, comma-separated ($KAFKA_BROKERS when set)")
	topic := flag.String("topic", "example-orders", "topic")
	group := flag.String("group", "example-billing", "consumer group")
	count := flag.Int("count", 10, "exit after this many records")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	if err := run(strings.Split(*brokers, ","), *topic, *group, *count, *timeout); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(brokers []string, topic, group string, count int, timeout time.Duration) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // a new group reads from the start
		kgo.DisableAutoCommit(),                           // commit after processing
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			log.Printf("assigned %v", m)
		}),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
			log.Printf("revoked %v", m)
			if err := cl.CommitUncommittedOffsets(ctx); err != nil {
				log.Printf("commit on revoke: %v", err)
			}
		}),
	)
	if err != nil {
		return err
	}
	defer cl.Close() // leaves the group: the others rebalance at once

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	seen := 0
	for seen < count {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return fmt.Errorf("consumed %d of %d records within %v", seen, count, timeout)
		}
		fs.EachError(func(t string, p int32, err error) { log.Printf("fetch %s/%d: %v", t, p, err) })
		fs.EachRecord(func(r *kgo.Record) {
			log.Printf("received key=%s partition=%d offset=%d: %s", r.Key, r.Partition, r.Offset, r.Value)
			seen++
		})
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
	}
	log.Printf("done: %d records consumed and committed by group %s", seen, group)
	return nil
}
