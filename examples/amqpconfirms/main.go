// Command amqpconfirms publishes persistent messages to a durable queue
// with publisher confirms using amqp091-go, RabbitMQ's Go client, then
// consumes them with manual acknowledgements. Nothing in it is
// Keel-specific: point it at RabbitMQ and it behaves the same.
//
//	go run ./cmd/keel serve          # in one terminal (AMQP on 127.0.0.1:5672)
//	go run ./examples/amqpconfirms   # in another
//
// A confirm (basic.ack) means the broker has the message: with Keel's
// default flushDiskType=SYNC_FLUSH it is on disk (fdatasync), so a kill -9
// after the ack cannot lose it. A nack means it was not stored. The
// consumer takes one message at a time more than it has acknowledged
// (prefetch -prefetch) and acks each after handling it; a message it did
// not ack would be delivered again, with redelivered=true.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

func main() {
	url := flag.String("url", cmp.Or(os.Getenv("AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/"), "broker URL ($AMQP_URL when set)")
	queue := flag.String("queue", "example-confirms", "durable queue")
	count := flag.Int("count", 10, "messages to publish and consume")
	prefetch := flag.Int("prefetch", 5, "unacknowledged deliveries the consumer accepts")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *url, *queue, *count, *prefetch); err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(ctx context.Context, url, queue string, count, prefetch int) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", url, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", queue, err)
	}
	// Start from an empty queue, so the consumer below sees exactly this
	// run's messages.
	if _, err := ch.QueuePurge(queue, false); err != nil {
		return err
	}
	if err := publish(ctx, ch, queue, count); err != nil {
		return err
	}
	return consume(ctx, ch, queue, count, prefetch)
}

// publish sends count persistent messages and waits for every confirm.
func publish(ctx context.Context, ch *amqp.Channel, queue string, count int) error {
	if err := ch.Confirm(false); err != nil {
		return fmt.Errorf("confirm.select: %w", err)
	}
	pending := make([]*amqp.DeferredConfirmation, 0, count)
	for i := range count {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", queue, false, false, amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "text/plain",
			MessageId:    fmt.Sprintf("m-%d", i),
			Body:         fmt.Appendf(nil, "order %d", i),
		})
		if err != nil {
			return fmt.Errorf("publish %d: %w", i, err)
		}
		pending = append(pending, dc)
	}
	for i, dc := range pending {
		ok, err := dc.WaitContext(ctx)
		if err != nil {
			return fmt.Errorf("confirm of message %d: %w", i, err)
		}
		if !ok {
			return fmt.Errorf("message %d was nacked: the broker did not store it", i)
		}
	}
	fmt.Printf("published %d persistent messages to %s, every one confirmed\n", count, queue)
	return nil
}

// consume receives count messages with manual acks.
func consume(ctx context.Context, ch *amqp.Channel, queue string, count, prefetch int) error {
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.ConsumeWithContext(ctx, queue, "", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", queue, err)
	}
	for got := 0; got < count; got++ {
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumed %d of %d messages: %w", got, count, ctx.Err())
		case d, ok := <-deliveries:
			if !ok {
				return errors.New("the broker closed the consumer")
			}
			fmt.Printf("received %s: %q redelivered=%v\n", d.MessageId, d.Body, d.Redelivered)
			if err := d.Ack(false); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
		}
	}
	fmt.Printf("done: %d messages confirmed, consumed and acknowledged\n", count)
	return nil
}
