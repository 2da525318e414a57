// Command delay shows scheduled messages with the official RocketMQ Go
// client: one message with a delay level (WithDelayTimeLevel) and one with
// an absolute delivery time (WithDelayTimestamp). The broker stores both at
// once, but consumers see them only when they are due.
//
//	go run ./cmd/keel serve        # in one terminal
//	go run ./examples/delay        # in another
//
// Delay levels index messageDelayLevel in broker.conf (default
// "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h": level 2 is
// 5 s). A delivery timestamp may be up to 3 days ahead. The consumer
// prints how long after sending each message arrived and fails if one came
// early (that check assumes the broker runs on this machine's clock). Keel
// keeps the schedule on disk, so a restart in between loses nothing.
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
	topic := flag.String("topic", "ExampleDelayTopic", "topic")
	level := flag.Int("level", 2, "delay level of the first message (2 = 5s with the default messageDelayLevel)")
	after := flag.Duration("after", 3*time.Second, "the second message is due this long after sending")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	rlog.SetLogLevel("error")
	if err := run(*ns, *topic, *level, *after, *timeout); err != nil {
		log.Print(nscheck.Explain(err, *ns))
		os.Exit(1)
	}
}

func run(ns, topic string, level int, after, timeout time.Duration) error {
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	due, err := send(ns, topic, runID, level, after)
	if err != nil {
		return err
	}

	type arrival struct {
		key string
		at  time.Time
	}
	got := make(chan arrival, 16)
	c, err := rocketmq.NewPushConsumer(consumer.WithNameServer([]string{ns}),
		consumer.WithGroupName("example-delay-consumer"), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return err
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range ms {
			now := time.Now()
			sent := time.UnixMilli(m.BornTimestamp)
			log.Printf("received %q %v after it was sent", m.Body, now.Sub(sent).Round(time.Millisecond))
			if strings.HasPrefix(m.GetKeys(), runID) {
				got <- arrival{m.GetKeys(), now}
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
	defer c.Shutdown()

	deadline := time.After(timeout)
	for len(due) > 0 {
		select {
		case a := <-got:
			d, ok := due[a.key]
			if !ok {
				continue // a redelivered duplicate
			}
			if a.at.Before(d) {
				return fmt.Errorf("%s arrived %v early", a.key, d.Sub(a.at))
			}
			delete(due, a.key)
		case <-deadline:
			return fmt.Errorf("timed out after %v: %d delayed messages not received", timeout, len(due))
		}
	}
	log.Print("done: both delayed messages arrived, none early")
	return nil
}

// send sends the two delayed messages and returns, by key, the earliest
// time each may be delivered.
func send(ns, topic, runID string, level int, after time.Duration) (map[string]time.Time, error) {
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{ns}), producer.WithGroupName("example-delay-producer"))
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start producer: %w", err)
	}
	defer p.Shutdown()

	due := map[string]time.Time{}
	byLevel := primitive.NewMessage(topic, []byte(fmt.Sprintf("delayed by level %d", level)))
	byLevel.WithKeys([]string{runID + "-level"}).WithDelayTimeLevel(level)
	start := time.Now()
	if err := sendOne(p, byLevel); err != nil {
		return nil, err
	}
	due[runID+"-level"] = start.Add(levelDelay(level))

	at := time.Now().Add(after)
	byTime := primitive.NewMessage(topic, []byte("due at "+at.Format("15:04:05.000")))
	byTime.WithKeys([]string{runID + "-time"}).WithDelayTimestamp(at)
	if err := sendOne(p, byTime); err != nil {
		return nil, err
	}
	// The broker compares with its own clock; allow for milliseconds lost
	// to the timestamp's rounding.
	due[runID+"-time"] = at.Truncate(time.Millisecond)
	return due, nil
}

func sendOne(p rocketmq.Producer, m *primitive.Message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := p.SendSync(ctx, m)
	if err != nil {
		return fmt.Errorf("send %q: %w", m.Body, err)
	}
	log.Printf("sent %q: msgId=%s (stored now, delivered when due)", m.Body, res.MsgID)
	return nil
}

// levelDelay is the delay of a level under the default messageDelayLevel
// (0, no check, for a level out of range). Against a broker whose
// broker.conf changes messageDelayLevel the "not early" check of the level
// message does not apply.
func levelDelay(level int) time.Duration {
	defaults := []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
		time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute, 6 * time.Minute,
		7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute, 20 * time.Minute,
		30 * time.Minute, time.Hour, 2 * time.Hour}
	if level < 1 || level > len(defaults) {
		return 0
	}
	return defaults[level-1]
}
