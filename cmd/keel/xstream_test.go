package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCrossAMQPStream: an AMQP stream queue declared over a Keel topic
// (x-keel-topic) is that topic's partition 0: a franz-go consumer reads
// the messages AMQP publishers appended, and the record a Kafka producer
// wrote, at the same offsets as the stream's consumers see in
// x-stream-offset.
func TestCrossAMQPStream(t *testing.T) {
	n := startXNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "x-stream"
	kp, err := kgo.NewClient(kgo.SeedBrokers(n.kafka), kgo.AllowAutoTopicCreation(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kp.Close()
	if err := kp.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("from-kafka")}).FirstErr(); err != nil {
		t.Fatal(err) // creates the topic
	}

	conn, err := amqp091.Dial("amqp://guest:guest@" + n.amqp + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("orders-stream", true, false, false, false, amqp091.Table{"x-queue-type": "stream", "x-keel-topic": topic}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const N = 5
	for i := range N {
		dc, err := ch.PublishWithDeferredConfirm("", "orders-stream", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent,
			Body: []byte(fmt.Sprint("from-amqp-", i))})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %d: %v", i, err)
		}
	}

	// The stream's view: offset of each body.
	if err := ch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.Consume("orders-stream", "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	amqpAt := map[string]int64{}
	for range N + 1 {
		select {
		case d := <-dc:
			off, ok := d.Headers["x-stream-offset"].(int64)
			if !ok {
				t.Fatalf("delivery %q without x-stream-offset: %v", d.Body, d.Headers)
			}
			amqpAt[string(d.Body)] = off
			d.Ack(false)
		case <-ctx.Done():
			t.Fatalf("the stream delivered %d of %d messages", len(amqpAt), N+1)
		}
	}

	// The Kafka view of partition 0 from its start.
	kc, err := kgo.NewClient(kgo.SeedBrokers(n.kafka), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	kafkaAt := map[string]int64{}
	for len(kafkaAt) < N+1 {
		fs := kc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("the Kafka consumer read %d of %d records: %v", len(kafkaAt), N+1, kafkaAt)
		}
		fs.EachRecord(func(r *kgo.Record) { kafkaAt[string(r.Value)] = r.Offset })
	}
	want := map[string]int64{"from-kafka": 0}
	for i := range N {
		want[fmt.Sprint("from-amqp-", i)] = int64(i + 1)
	}
	for body, off := range want {
		if amqpAt[body] != off || kafkaAt[body] != off {
			t.Errorf("%q: stream offset %d, Kafka offset %d, want %d", body, amqpAt[body], kafkaAt[body], off)
		}
	}
	if len(amqpAt) != N+1 || len(kafkaAt) != N+1 {
		t.Errorf("stream %v, Kafka %v", amqpAt, kafkaAt)
	}
}
