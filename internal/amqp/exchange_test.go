package amqp

import (
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/amqp/wire"
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
	// A publish to a missing exchange closes the channel with 404 (the
	// client sees it on the channel's close notification: a method it
	// sends after may meet the channel already closed).
	ch = b.channel()
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	if err := ch.Publish("nope", "k", false, false, amqp091.Publishing{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if !isCode(err, 404) {
			t.Fatalf("publish to a missing exchange: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a publish to a missing exchange did not close the channel")
	}
}

func mustTopic(t *testing.T, b *broker, name string) string {
	q := b.srv.vhosts["/"].queue(name)
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

func TestHeadersMatch(t *testing.T) {
	h := wire.Table{"format": []byte("pdf"), "type": []byte("report"), "size": int32(5), "x-k": []byte("v")}
	for _, tc := range []struct {
		args wire.Table
		want bool
	}{
		{wire.Table{"format": "pdf", "type": "report"}, true},
		{wire.Table{"x-match": "all", "format": "pdf", "type": "log"}, false},
		{wire.Table{"x-match": "any", "format": "pdf", "type": "log"}, true},
		{wire.Table{"x-match": "any", "format": "zip", "type": "log"}, false},
		{wire.Table{"size": int64(5)}, true}, // numbers by value
		{wire.Table{"size": "5"}, false},     // not a string
		{wire.Table{"format": nil}, true},    // void: present with any value
		{wire.Table{"missing": nil}, false},
		{wire.Table{"x-k": "other"}, true},                           // x- arguments ignored...
		{wire.Table{"x-match": "all-with-x", "x-k": "other"}, false}, // ... unless asked for
		{wire.Table{}, true},
		{wire.Table{"x-match": "any"}, false},
	} {
		if got := headersMatch(tc.args, h); got != tc.want {
			t.Errorf("%v ~ %v = %v, want %v", tc.args, h, got, tc.want)
		}
	}
}

// A headers exchange routes by the message's headers; exchange-to-exchange
// bindings chain exchanges (a cycle delivers once); an auto-delete
// exchange goes with its last binding; bindings survive a restart.
func TestHeadersAndExchangeToExchangeBindings(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	for _, e := range [][2]string{{"hdr", "headers"}, {"front", "fanout"}, {"back", "direct"}} {
		if err := ch.ExchangeDeclare(e[0], e[1], true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []string{"pdfs", "anyq", "routed"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(ch.QueueBind("pdfs", "", "hdr", false, amqp091.Table{"x-match": "all", "format": "pdf", "type": "report"}))
	must(ch.QueueBind("anyq", "", "hdr", false, amqp091.Table{"x-match": "any", "format": "zip", "type": "report"}))
	// front -> back -> routed, and back -> front (a cycle).
	must(ch.ExchangeBind("back", "", "front", false, nil))
	must(ch.ExchangeBind("front", "k", "back", false, nil))
	must(ch.QueueBind("routed", "k", "back", false, nil))
	must(ch.Confirm(false))
	pub := func(exch, key string, headers amqp091.Table, body string) {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirm(exch, key, false, false, amqp091.Publishing{Headers: headers, Body: []byte(body), DeliveryMode: 2})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %s: %v", body, err)
		}
	}
	pub("hdr", "", amqp091.Table{"format": "pdf", "type": "report"}, "both")
	pub("hdr", "", amqp091.Table{"format": "pdf", "type": "log"}, "neither")
	pub("hdr", "", amqp091.Table{"format": "zip"}, "any only")
	pub("front", "k", nil, "chained")
	b.restart()
	ch = b.channel()
	expect := func(q string, bodies ...string) {
		t.Helper()
		for _, want := range bodies {
			d, ok, err := ch.Get(q, true)
			if err != nil || !ok || string(d.Body) != want {
				t.Fatalf("%s: got %q %v %v, want %q", q, d.Body, ok, err, want)
			}
		}
		if d, ok, _ := ch.Get(q, true); ok {
			t.Fatalf("%s: unexpected %q", q, d.Body)
		}
	}
	expect("pdfs", "both")
	expect("anyq", "both", "any only")
	expect("routed", "chained")
	// The bindings came back: routed again after the restart.
	must(ch.Confirm(false))
	pub("front", "k", nil, "again")
	expect("routed", "again")

	// An auto-delete exchange goes when its last binding does.
	must(ch.ExchangeDeclare("tmp", "fanout", false, true, false, false, nil))
	must(ch.QueueBind("routed", "", "tmp", false, nil))
	must(ch.QueueUnbind("routed", "", "tmp", nil))
	if err := ch.ExchangeDeclarePassive("tmp", "fanout", false, true, false, false, nil); !isCode(err, 404) {
		t.Fatalf("auto-delete exchange after its last unbind: %v", err)
	}
	ch = b.channel()
	if err := ch.ExchangeBind("nope", "", "front", false, nil); !isCode(err, 404) {
		t.Fatalf("bind to a missing exchange: %v", err)
	}
	ch = b.channel()
	if err := ch.QueueBind("pdfs", "", "hdr", false, amqp091.Table{"x-match": "some"}); !isCode(err, 406) {
		t.Fatalf("bad x-match: %v", err)
	}
}

// An internal exchange takes no publishes (403) but routes what another
// exchange passes it; it and its flag survive a restart.
func TestInternalExchange(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if err := ch.ExchangeDeclare("inner", "direct", true, false, true, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("outer", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("sink", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("sink", "k", "inner", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeBind("inner", "", "outer", false, nil); err != nil {
		t.Fatal(err)
	}
	b.restart()
	ch = b.channel()
	publishTo(t, ch, "outer", "k", "through")
	if d, ok, err := ch.Get("sink", true); err != nil || !ok || string(d.Body) != "through" {
		t.Fatalf("through the internal exchange: %v %v %q", ok, err, d.Body)
	}
	err := exception(t, b.channel(), func(ch *amqp091.Channel) error {
		ch.Publish("inner", "k", false, false, amqp091.Publishing{Body: []byte("direct")})
		_, err := ch.QueueDeclarePassive("sink", true, false, false, false, nil)
		return err
	})
	if !isCode(err, 403) {
		t.Fatalf("publish to an internal exchange: %v, want 403", err)
	}
	if err := b.channel().ExchangeDeclare("inner", "direct", true, false, false, false, nil); !isCode(err, 406) {
		t.Fatalf("redeclare without internal after a restart: %v, want 406", err)
	}
}

// A message an exchange routes nowhere goes to its alternate exchange
// (kept across a restart); a mandatory one is then not returned.
func TestAlternateExchange(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if err := ch.ExchangeDeclare("unrouted", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("orders", "direct", true, false, false, false, amqp091.Table{"alternate-exchange": "unrouted"}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"eu", "rest"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ch.QueueBind("eu", "eu", "orders", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("rest", "", "unrouted", false, nil); err != nil {
		t.Fatal(err)
	}
	b.restart()
	ch = b.channel()
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"eu", "us"} {
		dc, err := ch.PublishWithDeferredConfirm("orders", key, true, false, amqp091.Publishing{Body: []byte(key), DeliveryMode: 2})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %s: %v", key, err)
		}
	}
	for q, want := range map[string]string{"eu": "eu", "rest": "us"} {
		if d, ok, err := ch.Get(q, true); err != nil || !ok || string(d.Body) != want {
			t.Fatalf("%s: %v %v %q, want %q", q, ok, err, d.Body, want)
		}
	}
	select {
	case r := <-returns:
		t.Fatalf("a message the alternate exchange took was returned: %+v", r)
	default:
	}
	if err := ch.ExchangeDeclare("orders", "direct", true, false, false, false, amqp091.Table{"alternate-exchange": "other"}); !isCode(err, 406) {
		t.Fatalf("redeclare with another alternate exchange: %v, want 406", err)
	}
}
