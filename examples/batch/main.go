// Command batch sends several messages in one request with the official
// RocketMQ Go client (SendSync with more than one message), which costs one
// round trip and, on Keel, one append and one fdatasync for the whole batch.
//
//	go run ./cmd/keel serve        # in one terminal
//	go run ./examples/batch        # in another
//
// A batch is stored all or nothing, in one queue, at consecutive offsets.
// Its messages must share a topic and must not be delayed; the whole batch
// must stay under the broker's maxMessageSize (default 4 MiB). The program
// sends -batches batches of -size messages and prints where each landed.
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

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/keelmq/keel/examples/internal/nscheck"
)

func main() {
	ns := flag.String("n", cmp.Or(os.Getenv("NAMESRV_ADDR"), "127.0.0.1:9876"), "NameServer address ($NAMESRV_ADDR when set)")
	topic := flag.String("topic", "ExampleBatchTopic", "topic")
	size := flag.Int("size", 10, "messages per batch")
	batches := flag.Int("batches", 3, "number of batches")
	flag.Parse()
	rlog.SetLogLevel("error")
	if err := run(*ns, *topic, *size, *batches); err != nil {
		log.Print(nscheck.Explain(err, *ns))
		os.Exit(1)
	}
}

func run(ns, topic string, size, batches int) error {
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{ns}), producer.WithGroupName("example-batch-producer"))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("start producer: %w", err)
	}
	defer p.Shutdown()

	runID := time.Now().Unix()
	for b := 0; b < batches; b++ {
		msgs := make([]*primitive.Message, size)
		for i := range msgs {
			key := fmt.Sprintf("batch-%d-%d-%d", runID, b, i)
			msgs[i] = primitive.NewMessage(topic, []byte(fmt.Sprintf("message %d of batch %d", i, b)))
			msgs[i].WithTag("Batch").WithKeys([]string{key})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := p.SendSync(ctx, msgs...)
		cancel()
		if err != nil {
			return fmt.Errorf("send batch %d: %w", b, err)
		}
		if res.Status != primitive.SendOK {
			return fmt.Errorf("send batch %d: broker answered status %d", b, res.Status)
		}
		// The Go client gives batched messages no client message ID
		// (res.MsgID is empty); OffsetMsgID lists the broker's IDs of the
		// stored messages, comma-separated, and QueueOffset is the first's.
		ids := strings.Split(res.OffsetMsgID, ",")
		log.Printf("batch %d: %d messages stored in queue %d at offsets %d..%d, first ID %s",
			b, len(ids), res.MessageQueue.QueueId, res.QueueOffset, res.QueueOffset+int64(len(ids))-1, ids[0])
	}
	log.Printf("done: %d batches of %d messages sent to %s", batches, size, topic)
	return nil
}
