package amqp

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/store/record"
)

func TestTopicMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, key string
		want         bool
	}{
		{"a.b", "a.b", true}, {"a.*", "a.b", true}, {"a.*", "a", false}, {"a.*", "a.b.c", false},
		{"a.#", "a", true}, {"a.#", "a.b.c", true}, {"#", "", true}, {"#.c", "a.b.c", true},
		{"*.b.#", "a.b", true}, {"*.b.#", "b", false}, {"a.#.c", "a.c", true}, {"a.#.c", "a.x.y.c", true},
		{"a.#.c", "a.x.y", false}, {"", "", true}, {"a", "b", false},
	} {
		if got := topicMatch(splitWords(tc.pattern), splitWords(tc.key)); got != tc.want {
			t.Errorf("%q ~ %q = %v, want %v", tc.pattern, tc.key, got, tc.want)
		}
	}
}

func splitWords(s string) []string { return matchWords(s) }

// A fanout publish is one record referenced from every bound queue; the
// exchanges, bindings and the messages survive a restart.
func TestExchangesRouteOneRecordToSeveralQueues(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	for _, e := range [][2]string{{"logs", "fanout"}, {"events", "topic"}, {"jobs", "direct"}} {
		if err := ch.ExchangeDeclare(e[0], e[1], true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"f1", "f2", "t1", "d1"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, bd := range [][3]string{{"f1", "", "logs"}, {"f2", "", "logs"}, {"t1", "order.*.eu", "events"}, {"d1", "build", "jobs"}} {
		if err := ch.QueueBind(bd[0], bd[1], bd[2], false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][2]string{{"logs", "x"}, {"events", "order.new.eu"}, {"events", "order.new.us"}, {"jobs", "build"}, {"jobs", "test"}} {
		dc, err := ch.PublishWithDeferredConfirm(p[0], p[1], false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(p[0] + ":" + p[1])})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %v: %v", p, err)
		}
	}
	b.restart()
	ch = b.channel()
	want := map[string]string{"f1": "logs:x", "f2": "logs:x", "t1": "order.new.eu", "d1": "jobs:build"}
	for q, body := range want {
		d, ok, err := ch.Get(q, true)
		if err != nil || !ok || (string(d.Body) != body && string(d.Body) != "events:"+body) {
			t.Fatalf("%s: %q %v %v", q, d.Body, ok, err)
		}
		if _, ok, _ := ch.Get(q, true); ok {
			t.Fatalf("%s has a second message", q)
		}
	}
	// The fanout message is one record with two destinations.
	r, err := b.st.GetMessage(mustTopic(t, b, "f1"), queueID, 0, 1, 0, nil)
	if err != nil || len(r.Records) != 1 {
		t.Fatalf("read: %v", err)
	}
	if n := record.Envelope(r.Records[0]).DestCount(); n != 2 {
		t.Fatalf("fanout record has %d destinations, want 2", n)
	}
	r.Release()
	// The exchange and its bindings came back with the restart.
	publishTo(t, ch, "logs", "", "again")
	for _, q := range []string{"f1", "f2"} {
		if d, ok, err := ch.Get(q, true); err != nil || !ok || string(d.Body) != "again" {
			t.Fatalf("%s after restart: %q %v %v", q, d.Body, ok, err)
		}
	}
	// Redeclaring with another type is refused; amq.* names are reserved.
	if err := ch.ExchangeDeclare("logs", "direct", true, false, false, false, nil); !isCode(err, 406) {
		t.Fatalf("redeclare with another type: %v", err)
	}
	ch = b.channel()
	if err := ch.ExchangeDeclare("amq.mine", "direct", true, false, false, false, nil); !isCode(err, 403) {
		t.Fatalf("amq. prefix: %v", err)
	}
	ch = b.channel()
	if err := ch.Publish("nope", "k", false, false, amqp091.Publishing{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive("f1", true, false, false, false, nil); !isCode(err, 404) {
		t.Fatalf("publish to a missing exchange: %v", err)
	}
}

func mustTopic(t *testing.T, b *broker, name string) string {
	q := b.srv.vhost.queue(name)
	if q == nil {
		t.Fatalf("no queue %s", name)
	}
	return q.topic
}

func publishTo(t *testing.T, ch *amqp091.Channel, exchange, key, body string) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm(exchange, key, false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(body)})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish to %s: %v", exchange, err)
	}
}
