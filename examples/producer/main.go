// Command producer sends messages synchronously with the official RocketMQ
// Go client: each carries a tag and a key, and the program prints the send
// result the broker acknowledged (status, message ID, queue and offset).
//
//	go run ./cmd/keel serve        # in one terminal
//	go run ./examples/producer     # in another
//
// SendSync returns once the broker has stored the message; with Keel's
// default flushDiskType=SYNC_FLUSH that means it is on disk (fdatasync).
// The key ("order-<run>-<i>") makes the message findable by key later
// (for example `keel msg` or the console's message search).
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/keelmq/keel/examples/internal/nscheck"
)

func main() {
	ns := flag.String("n", cmp.Or(os.Getenv("NAMESRV_ADDR"), "127.0.0.1:9876"), "NameServer address ($NAMESRV_ADDR when set)")
	topic := flag.String("topic", "ExampleTopic", "topic")
	tag := flag.String("tag", "TagA", "tag of every message")
	count := flag.Int("count", 10, "number of messages to send")
	flag.Parse()
	rlog.SetLogLevel("error")
	if err := run(*ns, *topic, *tag, *count); err != nil {
		log.Print(nscheck.Explain(err, *ns))
		os.Exit(1)
	}
}

func run(ns, topic, tag string, count int) error {
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{ns}),
		producer.WithGroupName("example-producer"), producer.WithRetry(2))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("start producer: %w", err)
	}
	defer p.Shutdown()

	runID := time.Now().Unix()
	for i := 0; i < count; i++ {
		key := fmt.Sprintf("order-%d-%d", runID, i)
		m := primitive.NewMessage(topic, []byte(fmt.Sprintf("hello %d from the producer example", i)))
		m.WithTag(tag).WithKeys([]string{key})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := p.SendSync(ctx, m)
		cancel()
		if err != nil {
			return fmt.Errorf("send %s: %w", key, err)
		}
		if res.Status != primitive.SendOK {
			return fmt.Errorf("send %s: broker answered status %d", key, res.Status)
		}
		log.Printf("sent key=%s tag=%s: msgId=%s queue=%d offset=%d",
			key, tag, res.MsgID, res.MessageQueue.QueueId, res.QueueOffset)
	}
	log.Printf("done: %d messages sent to %s", count, topic)
	return nil
}
