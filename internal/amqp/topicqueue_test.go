package amqp

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

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
	waitEntries(t, b.st, "orders", 1)
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
	// A Kafka batch of two records and one of one record: three deliveries.
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
	for _, want := range []string{"kafka-0-of-2", "kafka-1-of-2", "kafka-0-of-1"} {
		if d := recv(t, dc); string(d.Body) != want || d.MessageId != "k" || d.Redelivered {
			t.Fatalf("got %q, want %q: %+v", d.Body, want, d)
		} else {
			d.Ack(false)
		}
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

// TestKafkaBatchInAMQPQueue: the records of a Kafka batch stored by an
// earlier release (one entry for the batch) are delivered one by one; the entry is settled when all are acked, and when one is
// requeued the whole batch comes back (every record, redelivered=true)
// once the others are settled; basic.get takes them one at a time too.
func TestKafkaBatchInAMQPQueue(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("kq", true, false, false, false, amqp091.Table{ArgKeelTopic: "kt"}); err != nil {
		t.Fatal(err)
	}
	put := func(n int) {
		var recs []translate.KafkaRecord
		for i := range n {
			recs = append(recs, translate.KafkaRecord{Offset: int64(i), Timestamp: 5000, Value: fmt.Appendf(nil, "r%d", i)})
		}
		rec, err := record.AppendEnvelope(nil, record.KafkaBatch, int32(n), []record.Dest{{Topic: "kt", QueueID: 0}}, translate.AppendKafkaBatch(nil, recs))
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := b.st.PutRecord(context.Background(), rec); !r.OK() {
			t.Fatal(r.Status, r.Err)
		}
	}
	put(3)
	waitEntries(t, b.st, "kt", 1)
	var got []string
	var tags []amqp091.Delivery
	for range 3 {
		d, ok, err := ch.Get("kq", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		got = append(got, string(d.Body))
		tags = append(tags, d)
	}
	if fmt.Sprint(got) != "[r0 r1 r2]" {
		t.Fatalf("got %v", got)
	}
	if _, ok, _ := ch.Get("kq", false); ok {
		t.Fatal("a fourth message")
	}
	tags[1].Nack(false, true) // requeue one
	tags[0].Ack(false)
	if _, ok, _ := ch.Get("kq", false); ok {
		t.Fatal("the batch came back before all its records were settled")
	}
	tags[2].Ack(false)
	got = nil
	for range 3 {
		d, ok, err := ch.Get("kq", false)
		if err != nil || !ok || !d.Redelivered {
			t.Fatalf("get after the requeue: %v %v redelivered %v", ok, err, d.Redelivered)
		}
		got = append(got, string(d.Body))
		d.Ack(false)
	}
	if fmt.Sprint(got) != "[r0 r1 r2]" {
		t.Fatalf("after the requeue: %v", got)
	}
	if _, ok, _ := ch.Get("kq", false); ok {
		t.Fatal("the batch is still there after every record was acked")
	}
}

// TestKafkaRecordsAreEntriesInAMQPQueue: a Kafka batch with one entry per
// record delivers each record from its own entry, settled on its own: a
// requeued record comes back alone (redelivered) while the others stay
// acknowledged.
func TestKafkaRecordsAreEntriesInAMQPQueue(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("kq", true, false, false, false, amqp091.Table{ArgKeelTopic: "kt"}); err != nil {
		t.Fatal(err)
	}
	var recs []translate.KafkaRecord
	for i := range 3 {
		recs = append(recs, translate.KafkaRecord{Offset: int64(i), Timestamp: 5000, Value: fmt.Appendf(nil, "r%d", i)})
	}
	rec, err := record.AppendEnvelopeFlags(nil, record.KafkaBatch, record.FlagEntryPerMessage, 3, []record.Dest{{Topic: "kt", QueueID: 0}}, translate.AppendKafkaBatch(nil, recs))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := b.st.PutRecord(context.Background(), rec); !r.OK() {
		t.Fatal(r.Status, r.Err)
	}
	waitEntries(t, b.st, "kt", 3)
	var got []string
	var ds []amqp091.Delivery
	for range 3 {
		d, ok, err := ch.Get("kq", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		got = append(got, string(d.Body))
		ds = append(ds, d)
	}
	if fmt.Sprint(got) != "[r0 r1 r2]" {
		t.Fatalf("got %v", got)
	}
	ds[1].Nack(false, true)
	ds[0].Ack(false)
	d, ok, err := ch.Get("kq", false)
	if err != nil || !ok || string(d.Body) != "r1" || !d.Redelivered {
		t.Fatalf("after requeueing r1: %v %v %q redelivered %v", ok, err, d.Body, d.Redelivered)
	}
	d.Ack(false)
	ds[2].Ack(false)
	if _, ok, _ := ch.Get("kq", false); ok {
		t.Fatal("a message after every record was acked")
	}
}

func waitEntries(t *testing.T, st *store.Store, topic string, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for st.MaxOffset(topic, 0) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d entries, want %d", topic, st.MaxOffset(topic, 0), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A queue over a Keel topic with x-message-ttl measures a RocketMQ
// record's age from its store time (a record without an AMQP envelope
// has no AMQP store time of its own): a fresh one is delivered, not
// expired at once.
func TestTopicQueueTTLFromStoreTime(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("fed", true, false, false, false, amqp091.Table{ArgKeelTopic: "FedTopic", "x-message-ttl": int32(60000)}); err != nil {
		t.Fatal(err)
	}
	putRocketMQ(t, b.st, "FedTopic", 7)
	d := getWithin(t, ch, "fed")
	if string(d.Body) != "rmq-7" {
		t.Fatalf("got %q", d.Body)
	}
}

// The records of a Kafka batch with one entry per record, in a queue over
// a Keel topic with x-message-ttl, are aged from when the store wrote the
// batch: fresh ones are delivered, not expired at once.
func TestTopicQueueTTLOfKafkaRecords(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("kttl", true, false, false, false, amqp091.Table{ArgKeelTopic: "KafkaTTL", "x-message-ttl": int32(60000)}); err != nil {
		t.Fatal(err)
	}
	recs := []translate.KafkaRecord{{Offset: 0, Timestamp: 5000, Value: []byte("k0")}, {Offset: 1, Timestamp: 5000, Value: []byte("k1")}}
	rec, err := record.AppendEnvelopeFlags(nil, record.KafkaBatch, record.FlagEntryPerMessage, 2, []record.Dest{{Topic: "KafkaTTL", QueueID: 0}}, translate.AppendKafkaBatch(nil, recs))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := b.st.PutRecord(context.Background(), rec); !r.OK() {
		t.Fatal(r.Status, r.Err)
	}
	waitEntries(t, b.st, "KafkaTTL", 2)
	for _, want := range []string{"k0", "k1"} {
		d := getWithin(t, ch, "kttl")
		if string(d.Body) != want {
			t.Fatalf("got %q, want %q", d.Body, want)
		}
		d.Ack(false)
	}
}
