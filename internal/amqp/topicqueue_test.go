package amqp

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
)

func putRocketMQ(t *testing.T, st *store.Store, topic string, i int) {
	t.Helper()
	m := &message.Message{Topic: topic, QueueID: 0, BornTimestamp: 1_700_000_000_000 + int64(i)*1000, Body: fmt.Appendf(nil, "rmq-%d", i),
		BornHost: netip.MustParseAddrPort("127.0.0.1:1"), StoreHost: netip.MustParseAddrPort("127.0.0.1:2"),
		Properties: message.EncodeProperties(map[string]string{"KEYS": fmt.Sprint("key-", i), "CONTENT_TYPE": "text/plain", "color": "red"})}
	if r := st.PutMessages(context.Background(), []*message.Message{m}); !r.OK() {
		t.Fatalf("put: %v %v", r.Status, r.Err)
	}
}

// TestQueueOverKeelTopic: a queue declared with x-keel-topic gets what
// RocketMQ producers write to the topic once it exists (converted:
// KEYS as message-id, properties as headers, born time as timestamp),
// stores what AMQP publishers route to it in that topic, survives a
// restart still fed, and its deletion keeps the topic.
func TestQueueOverKeelTopic(t *testing.T) {
	b := startBroker(t)
	putRocketMQ(t, b.st, "orders", 0) // before the queue: not for it
	ch := b.channel()
	args := amqp091.Table{ArgKeelTopic: "orders"}
	if _, err := ch.QueueDeclare("feed", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	if _, err := b.channel().QueueDeclare("feed2", true, false, false, false, args); err == nil {
		t.Fatal("a second queue over the same topic was declared")
	}
	ch = b.channel()
	dc, err := ch.Consume("feed", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	putRocketMQ(t, b.st, "orders", 1)
	d := recv(t, dc)
	if string(d.Body) != "rmq-1" || d.MessageId != "key-1" || d.ContentType != "text/plain" || d.Headers["color"] != "red" ||
		d.Timestamp.Unix() != 1_700_000_001 || d.DeliveryMode != amqp091.Persistent || d.RoutingKey != "orders" {
		t.Fatalf("delivery %+v", d)
	}
	d.Ack(false)
	before := b.st.MaxOffset("orders", 0)
	publishConfirmed(t, b.channel(), "feed", "from-amqp")
	if d := recv(t, dc); string(d.Body) != "from-amqp" {
		t.Fatalf("got %q", d.Body)
	} else {
		d.Ack(false)
	}
	if got := b.st.MaxOffset("orders", 0); got != before+1 {
		t.Fatalf("the AMQP publish is not in the topic: %d entries, had %d", got, before)
	}
	// A multi-record Kafka batch is one entry: refused, not delivered in part;
	// a one-record batch is delivered.
	for _, n := range []int{2, 1} {
		var recs []translate.KafkaRecord
		for i := range n {
			recs = append(recs, translate.KafkaRecord{Offset: int64(i), Timestamp: 5000, Key: []byte("k"), Value: fmt.Appendf(nil, "kafka-%d-of-%d", i, n)})
		}
		rec, err := record.AppendEnvelope(nil, record.KafkaBatch, int32(n), []record.Dest{{Topic: "orders", QueueID: 0}}, translate.AppendKafkaBatch(nil, recs))
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := b.st.PutRecord(context.Background(), rec); !r.OK() {
			t.Fatal(r.Status, r.Err)
		}
	}
	if d := recv(t, dc); string(d.Body) != "kafka-0-of-1" || d.MessageId != "k" {
		t.Fatalf("got %q %+v", d.Body, d)
	} else {
		d.Ack(false)
	}
	ch.QueueDeclarePassive("feed", true, false, false, false, args) // the acks were read
	b.restart()
	ch = b.channel()
	dc, err = ch.Consume("feed", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	putRocketMQ(t, b.st, "orders", 2)
	if d := recv(t, dc); string(d.Body) != "rmq-2" || d.Redelivered {
		t.Fatalf("after restart: %q redelivered %v", d.Body, d.Redelivered)
	}
	if _, err := ch.QueueDelete("feed", false, false, false); err != nil {
		t.Fatal(err)
	}
	if got := b.st.MaxOffset("orders", 0); got == 0 {
		t.Fatal("deleting the queue deleted the topic")
	}
}

func TestKeelTopicArgumentChecked(t *testing.T) {
	b := startBroker(t)
	for _, v := range []any{"", "bad topic", "%AMQP%x", int32(3)} {
		if _, err := b.channel().QueueDeclare("q", true, false, false, false, amqp091.Table{ArgKeelTopic: v}); err == nil {
			t.Errorf("x-keel-topic %q accepted", v)
		}
	}
}
