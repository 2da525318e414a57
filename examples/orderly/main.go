// Command orderly shows ordered messages with the official RocketMQ Go
// client: every step of one order goes to the same queue, and an orderly
// consumer receives each queue's messages one at a time, in the order they
// were stored.
//
//	go run ./cmd/keel serve        # in one terminal
//	go run ./examples/orderly      # in another
//
// The producer uses a queue selector (orderSelector) that maps an order ID
// to a queue, so the steps of an order (created, paid, shipped, delivered)
// share one queue while different orders spread over all of them. The
// consumer (WithConsumerOrder) locks its queues at the broker and checks
// that each order's steps arrive in sequence. Order is per queue: there is
// no order between messages of different queues.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"hash/crc32"
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

var steps = []string{"created", "paid", "shipped", "delivered"}

// orderSelector picks a message's queue from its order ID (the message
// key), so one order always lands on the same queue.
type orderSelector struct{}

func (orderSelector) Select(m *primitive.Message, queues []*primitive.MessageQueue, _ string) *primitive.MessageQueue {
	return queues[crc32.ChecksumIEEE([]byte(m.GetKeys()))%uint32(len(queues))]
}

func main() {
	ns := flag.String("n", cmp.Or(os.Getenv("NAMESRV_ADDR"), "127.0.0.1:9876"), "NameServer address ($NAMESRV_ADDR when set)")
	topic := flag.String("topic", "ExampleOrderTopic", "topic")
	orders := flag.Int("orders", 4, "number of orders")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	rlog.SetLogLevel("error")
	if err := run(*ns, *topic, *orders, *timeout); err != nil {
		log.Print(nscheck.Explain(err, *ns))
		os.Exit(1)
	}
}

func run(ns, topic string, orders int, timeout time.Duration) error {
	runID := fmt.Sprintf("%d", time.Now().UnixNano())
	if err := send(ns, topic, runID, orders); err != nil {
		return err
	}

	type delivery struct{ order, step string }
	got := make(chan delivery, 64)
	c, err := rocketmq.NewPushConsumer(consumer.WithNameServer([]string{ns}),
		consumer.WithGroupName("example-orderly-consumer"), consumer.WithConsumerOrder(true),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return err
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range ms {
			order, step, _ := strings.Cut(string(m.Body), " ")
			log.Printf("queue %d offset %d: %s %s", m.Queue.QueueId, m.QueueOffset, order, step)
			if strings.HasPrefix(order, runID) {
				got <- delivery{order, step}
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

	next := map[string]int{} // order -> index of the step expected next
	deadline := time.After(timeout)
	for complete := 0; complete < orders; {
		select {
		case d := <-got:
			i := next[d.order]
			if i >= len(steps) || steps[i] != d.step {
				return fmt.Errorf("order %s: got step %q, expected step %d", d.order, d.step, i)
			}
			next[d.order] = i + 1
			if i+1 == len(steps) {
				complete++
			}
		case <-deadline:
			return fmt.Errorf("timed out after %v: %d of %d orders complete", timeout, len(next), orders)
		}
	}
	log.Printf("done: the steps of all %d orders arrived in order", orders)
	return nil
}

// send sends every step of every order, the steps of one order through the
// same queue.
func send(ns, topic, runID string, orders int) error {
	p, err := rocketmq.NewProducer(producer.WithNameServer([]string{ns}),
		producer.WithGroupName("example-orderly-producer"), producer.WithQueueSelector(orderSelector{}))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return fmt.Errorf("start producer: %w", err)
	}
	defer p.Shutdown()
	// Steps are sent one after the other: the next step of an order is sent
	// only once the previous one is stored, which fixes their order.
	for _, step := range steps {
		for o := 0; o < orders; o++ {
			id := fmt.Sprintf("%s-order-%d", runID, o)
			m := primitive.NewMessage(topic, []byte(id+" "+step))
			m.WithKeys([]string{id})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := p.SendSync(ctx, m)
			cancel()
			if err != nil {
				return fmt.Errorf("send %s %s: %w", id, step, err)
			}
			log.Printf("sent %s %s to queue %d", id, step, res.MessageQueue.QueueId)
		}
	}
	return nil
}
