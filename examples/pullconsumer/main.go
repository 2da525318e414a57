// Command pullconsumer reads messages with the official RocketMQ Go
// client's pull consumer: the application asks for messages when it wants
// them (Poll) and acknowledges each batch (ACK), instead of registering a
// callback as a push consumer does.
//
//	go run ./cmd/keel serve           # in one terminal
//	go run ./examples/pullconsumer    # in another
//
// The program sends -count messages with tag -tag (and one with another
// tag, which the subscription filters out), then polls as
// group example-pull-consumer until it has read its own messages. A new
// group starts at the first offset, so earlier messages with the tag are
// printed too. ACK with CONSUME_SUCCESS advances the group's offsets; the
// client commits them to the broker periodically and at Shutdown, so the
// next run continues where this one stopped.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/keelmq/keel/examples/internal/nscheck"
)

func main() {
	ns := flag.String("n", cmp.Or(os.Getenv("NAMESRV_ADDR"), "127.0.0.1:9876"), "NameServer address ($NAMESRV_ADDR when set)")
	topic := flag.String("topic", "ExamplePullTopic", "topic")
	tag := flag.String("tag", "TagA", "tag to subscribe to")
	count := flag.Int("count", 8, "number of messages to send and read back")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	rlog.SetLogLevel("error")
	if err := run(*ns, *topic, *tag, *count, *timeout); err != nil {
		log.Print(nscheck.Explain(err, *ns))
		os.Exit(1)
	}
}

func run(ns, topic, tag string, count int, timeout time.Duration) error {
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	if err := send(ns, topic, tag, runID, count); err != nil {
		return err
	}

	c, err := rocketmq.NewPullConsumer(consumer.WithNameServer([]string{ns}),
		consumer.WithGroupName("example-pull-consumer"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return err
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: tag}); err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return fmt.Errorf("start pull consumer: %w", err)
	}
	defer c.Shutdown() // commits the acknowledged offsets

	seen := map[string]bool{}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for len(seen) < count {
		cr, err := c.Poll(ctx, 2*time.Second)
		if errors.Is(err, consumer.ErrNoNewMsg) {
			if ctx.Err() != nil {
				return fmt.Errorf("timed out after %v: read %d of this run's %d messages", timeout, len(seen), count)
			}
			log.Print("nothing new yet")
			continue
		}
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		for _, m := range cr.GetMsgList() {
			log.Printf("pulled %q tag=%s queue=%d offset=%d", m.Body, m.GetTags(), m.Queue.QueueId, m.QueueOffset)
			if strings.HasPrefix(m.GetKeys(), runID) {
				seen[m.GetKeys()] = true
			}
		}
		c.ACK(ctx, cr, consumer.ConsumeSuccess)
	}
	log.Printf("done: read this run's %d messages", count)
	return nil
}

// send stores count messages tagged tag (keys "<runID>-<i>") and one with
// another tag.
func send(ns, topic, tag, runID string, count int) error {
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{ns}), producer.WithGroupName("example-pull-producer"))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("start producer: %w", err)
	}
	defer p.Shutdown()
	other := primitive.NewMessage(topic, []byte("not for this subscription"))
	other.WithTag(tag + "-other").WithKeys([]string{"other-" + runID})
	msgs := []*primitive.Message{other}
	for i := 0; i < count; i++ {
		m := primitive.NewMessage(topic, []byte(fmt.Sprintf("pull me %d", i)))
		m.WithTag(tag).WithKeys([]string{fmt.Sprintf("%s-%d", runID, i)})
		msgs = append(msgs, m)
	}
	for _, m := range msgs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := p.SendSync(ctx, m)
		cancel()
		if err != nil {
			return fmt.Errorf("send %q: %w", m.Body, err)
		}
		log.Printf("sent %q tag=%s to queue %d", m.Body, m.GetTags(), res.MessageQueue.QueueId)
	}
	return nil
}
