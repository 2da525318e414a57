package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestLookupsFindKafkaAndAMQPMessages: messages written by franz-go (a
// batch of three records, a compressed batch of two) and by amqp091-go
// are found by every id `keel msg tail` prints (`keel msg get` of the
// message id and of the offset message id) and by their keys (`keel msg
// query --key`: a Kafka record's key, an AMQP message-id and
// correlation-id).
func TestLookupsFindKafkaAndAMQPMessages(t *testing.T) {
	n := startXNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const ktopic, atopic = "look-k", "look-a"
	for _, codec := range []kgo.CompressionCodec{kgo.NoCompression(), kgo.GzipCompression()} {
		kc, err := kgo.NewClient(kgo.SeedBrokers(n.kafka), kgo.AllowAutoTopicCreation(), kgo.ProducerBatchCompression(codec),
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()))
		if err != nil {
			t.Fatal(err)
		}
		var rs []*kgo.Record
		if codec == kgo.NoCompression() {
			rs = []*kgo.Record{{Key: []byte("k-1"), Value: []byte("kafka one")}, {Key: []byte("k-2"), Value: []byte("kafka two")},
				{Key: []byte("user 42"), Value: []byte("kafka three")}}
		} else {
			rs = []*kgo.Record{{Key: []byte("k-4"), Value: []byte("kafka four")}, {Key: []byte("k-5"), Value: []byte("kafka five")}}
		}
		for _, r := range rs {
			r.Topic = ktopic
		}
		if err := kc.ProduceSync(ctx, rs...).FirstErr(); err != nil { // one produce request: one batch
			t.Fatal(err)
		}
		kc.Close()
	}

	if code, out, errOut := keelCmd("topic", "create", atopic, "--queues", "1", "-n", n.ns); code != 0 {
		t.Fatalf("topic create: %d %s%s", code, out, errOut)
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
	if _, err := ch.QueueDeclare("look", true, false, false, false, amqp091.Table{"x-keel-topic": atopic}); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		dc, err := ch.PublishWithDeferredConfirm("", "look", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent,
			MessageId: fmt.Sprint("m-", i), CorrelationId: fmt.Sprint("c-", i), Body: []byte(fmt.Sprint("amqp ", i))})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %d: %v", i, err)
		}
	}

	tail := func(topic string, count int) []admin.Message {
		t.Helper()
		code, out, errOut := keelCmd("msg", "tail", "-n", n.ns, "--topic", topic, "--from-beginning", "--count", fmt.Sprint(count), "-o", "json")
		if code != 0 {
			t.Fatalf("msg tail %s: %d\n%s%s", topic, code, out, errOut)
		}
		var ms []admin.Message
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var m admin.Message
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				t.Fatalf("msg tail line %q: %v", line, err)
			}
			ms = append(ms, m)
		}
		return ms
	}
	get := func(args ...string) []admin.Message {
		t.Helper()
		code, out, errOut := keelCmd(append([]string{"msg", "-n", n.ns, "-o", "json"}, args...)...)
		if code != 0 {
			t.Errorf("keel msg %q: exit %d\n%s%s", args, code, out, errOut)
			return nil
		}
		var ms []admin.Message
		if err := json.Unmarshal([]byte(out), &ms); err != nil {
			t.Fatalf("keel msg %q: %v\n%s", args, err, out)
		}
		return ms
	}
	bodies := func(ms []admin.Message) string {
		var b []string
		for _, m := range ms {
			b = append(b, m.BodyText)
		}
		return strings.Join(b, "|")
	}

	ks := tail(ktopic, 5)
	as := tail(atopic, 2)
	if got := bodies(ks); got != "kafka one|kafka two|kafka three|kafka four|kafka five" {
		t.Fatalf("tail %s: %s", ktopic, got)
	}
	for _, m := range append(ks, as...) {
		// The message id names one message; the offset id its record
		// (all the records of a Kafka batch).
		if got := get("get", m.MsgID); len(got) != 1 || got[0].BodyText != m.BodyText || got[0].MsgID != m.MsgID || got[0].QueueOffset != m.QueueOffset {
			t.Errorf("msg get %s (%q): %s", m.MsgID, m.BodyText, bodies(got))
		}
		got := get("get", m.OffsetMsgID)
		found := false
		for _, g := range got {
			found = found || g.MsgID == m.MsgID && g.BodyText == m.BodyText
		}
		if !found {
			t.Errorf("msg get %s (the offset id of %q): %s", m.OffsetMsgID, m.BodyText, bodies(got))
		}
	}
	if got := get("get", ks[1].OffsetMsgID); bodies(got) != "kafka one|kafka two|kafka three" {
		t.Errorf("msg get of the offset id of a batch: %s", bodies(got))
	}
	for _, q := range []struct{ topic, key, want string }{
		{ktopic, "k-1", "kafka one"}, {ktopic, "k-2", "kafka two"}, {ktopic, "user 42", "kafka three"}, {ktopic, "42", "kafka three"},
		{ktopic, "k-5", "kafka five"}, {atopic, "m-1", "amqp 1"}, {atopic, "c-0", "amqp 0"}, {ktopic, "m-1", ""},
	} {
		if got := get("query", "--topic", q.topic, "--key", q.key); bodies(got) != q.want {
			t.Errorf("msg query --topic %s --key %q: %q, want %q", q.topic, q.key, bodies(got), q.want)
		}
	}
}
