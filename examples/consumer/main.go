// Command consumer shows a push consumer with the official RocketMQ Go
// client, including redelivery: the listener returns CONSUME_SUCCESS for
// most messages and RECONSUME_LATER for a body containing "fail", which
// makes the broker deliver that message again after a delay.
//
//	go run ./cmd/keel serve        # in one terminal
//	go run ./examples/consumer     # in another
//
// The program first sends three messages of its own (the second asks to
// fail), then consumes the topic as group example-consumer. A new group
// starts at the first offset, so messages sent earlier (for example by
// examples/producer) are printed too. The failing message is refused until
// it has been redelivered -retries times (RECONSUME_TIMES counts them; the
// broker keeps it in %RETRY%example-consumer meanwhile), then accepted. The
// program exits when its own three messages are consumed, or with an error
// after -timeout.
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
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/keelmq/keel/examples/internal/nscheck"
)

func main() {
	ns := flag.String("n", cmp.Or(os.Getenv("NAMESRV_ADDR"), "127.0.0.1:9876"), "NameServer address ($NAMESRV_ADDR when set)")
	topic := flag.String("topic", "ExampleTopic", "topic")
	group := flag.String("group", "example-consumer", "consumer group")
	retries := flag.Int("retries", 2, "how many times the failing message is redelivered before it is accepted")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	rlog.SetLogLevel("error")
	if err := run(*ns, *topic, *group, int32(*retries), *timeout); err != nil {
		log.Print(nscheck.Explain(err, *ns))
		os.Exit(1)
	}
}

func run(ns, topic, group string, retries int32, timeout time.Duration) error {
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	bodies := []string{"first message", "please fail this one", "third message"}
	if err := send(ns, topic, runID, bodies); err != nil {
		return err
	}

	done := make(chan string, 16) // keys of this run's messages, once accepted
	c, err := rocketmq.NewPushConsumer(consumer.WithNameServer([]string{ns}), consumer.WithGroupName(group),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return err
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range ms {
			body := string(m.Body)
			if strings.Contains(body, "fail") && m.ReconsumeTimes < retries {
				log.Printf("RECONSUME_LATER %q (reconsumeTimes=%d): the broker will deliver it again", body, m.ReconsumeTimes)
				// Retry after delay level 1 (1 s) instead of the default
				// 3 + reconsumeTimes (10 s, 30 s, ...), to keep the example short.
				if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok {
					cc.DelayLevelWhenNextConsume = 1
				}
				return consumer.ConsumeRetryLater, nil
			}
			log.Printf("CONSUME_SUCCESS %q key=%s msgId=%s reconsumeTimes=%d", body, m.GetKeys(), m.MsgId, m.ReconsumeTimes)
			if strings.HasPrefix(m.GetKeys(), runID) {
				select {
				case done <- m.GetKeys():
				default: // a redelivered duplicate after the program is finishing
				}
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return fmt.Errorf("start consumer: %w", err)
	}
	defer c.Shutdown() // commits the consumed offsets to the broker

	deadline := time.After(timeout)
	for seen := map[string]bool{}; len(seen) < len(bodies); {
		select {
		case k := <-done:
			seen[k] = true
		case <-deadline:
			return fmt.Errorf("timed out after %v: %d of this run's %d messages consumed", timeout, len(seen), len(bodies))
		}
	}
	log.Printf("done: this run's %d messages consumed, the failing one after %d redeliveries", len(bodies), retries)
	return nil
}

// send stores the run's messages, keyed "<runID>-<i>".
func send(ns, topic, runID string, bodies []string) error {
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{ns}), producer.WithGroupName("example-consumer-producer"))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("start producer: %w", err)
	}
	defer p.Shutdown()
	for i, b := range bodies {
		m := primitive.NewMessage(topic, []byte(b))
		m.WithKeys([]string{fmt.Sprintf("%s-%d", runID, i)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.SendSync(ctx, m)
		cancel()
		if err != nil {
			return fmt.Errorf("send %q: %w", b, err)
		}
		log.Printf("sent %q", b)
	}
	return nil
}
