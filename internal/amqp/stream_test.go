package amqp

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
)

func declareStream(t *testing.T, ch *amqp091.Channel, name string, extra amqp091.Table) {
	t.Helper()
	args := amqp091.Table{"x-queue-type": "stream"}
	for k, v := range extra {
		args[k] = v
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
}

// streamConsumer opens a channel with prefetch and consumes the stream
// from offset (nil: the default, next).
func streamConsumer(t *testing.T, b *broker, name string, prefetch int, offset any) (*amqp091.Channel, <-chan amqp091.Delivery) {
	t.Helper()
	ch := b.channel()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	var args amqp091.Table
	if offset != nil {
		args = amqp091.Table{"x-stream-offset": offset}
	}
	dc, err := ch.Consume(name, "", false, false, false, false, args)
	if err != nil {
		t.Fatal(err)
	}
	return ch, dc
}

// readStream receives n deliveries, acks each, and checks their bodies
// and x-stream-offset headers: body want[i] at offset from+i.
func readStream(t *testing.T, dc <-chan amqp091.Delivery, from int64, want ...string) {
	t.Helper()
	for i, w := range want {
		d := recv(t, dc)
		if string(d.Body) != w {
			t.Fatalf("delivery %d: %q, want %q", i, d.Body, w)
		}
		if got, ok := d.Headers["x-stream-offset"].(int64); !ok || got != from+int64(i) {
			t.Fatalf("delivery %d (%q): x-stream-offset %#v, want %d", i, d.Body, d.Headers["x-stream-offset"], from+int64(i))
		}
		if d.Redelivered || d.ContentType != "text/plain" {
			t.Fatalf("delivery %d: redelivered %v content type %q", i, d.Redelivered, d.ContentType)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
}

func bodiesN(prefix string, from, to int) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// x-stream-offset first, last, next, a number (inside, past the end) and
// an interval; every delivery carries its offset.
func TestStreamConsumeFromOffsets(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", nil)
	publishConfirmed(t, ch, "s", bodiesN("m", 0, 10)...)
	if q, err := ch.QueueDeclarePassive("s", true, false, false, false, nil); err != nil || q.Messages != 10 {
		t.Fatalf("declare-ok: %+v %v", q, err)
	}

	pch, first := streamConsumer(t, b, "s", 4, "first")
	readStream(t, first, 0, bodiesN("m", 0, 10)...)
	none(t, pch, first, "s")
	lch, last := streamConsumer(t, b, "s", 4, "last")
	readStream(t, last, 9, "m9")
	none(t, lch, last, "s")
	nch, next := streamConsumer(t, b, "s", 4, nil)
	none(t, nch, next, "s")
	_, nextNamed := streamConsumer(t, b, "s", 4, "next")
	_, at5 := streamConsumer(t, b, "s", 4, int64(5))
	readStream(t, at5, 5, bodiesN("m", 5, 10)...)
	_, at5i32 := streamConsumer(t, b, "s", 4, int32(7))
	readStream(t, at5i32, 7, bodiesN("m", 7, 10)...)
	fch, far := streamConsumer(t, b, "s", 4, int64(1000))
	none(t, fch, far, "s")
	_, hour := streamConsumer(t, b, "s", 4, "1h")
	readStream(t, hour, 0, bodiesN("m", 0, 10)...)

	// A new message reaches every consumer at its cursor.
	publishConfirmed(t, ch, "s", "m10")
	for name, dc := range map[string]<-chan amqp091.Delivery{"first": first, "last": last, "next": next, "next named": nextNamed,
		"5": at5, "7": at5i32, "1h": hour} {
		t.Run(name, func(t *testing.T) { readStream(t, dc, 10, "m10") })
	}
	// Past the end at consume: it waits at the end as next does.
	readStream(t, far, 10, "m10")
	if q, err := ch.QueueDeclarePassive("s", true, false, false, false, nil); err != nil || q.Messages != 11 {
		t.Fatalf("declare-ok after consuming: %+v %v (a stream keeps its messages)", q, err)
	}
}

// A timestamp (AMQP type T, seconds) starts at the first message stored
// at or after it.
func TestStreamConsumeFromTimestamp(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", nil)
	publishConfirmed(t, ch, "s", bodiesN("old", 0, 3)...)
	stored := time.Now().Unix()
	waitUntil(t, "the next second", func() bool { return time.Now().Unix() > stored })
	ts := time.Now()
	publishConfirmed(t, ch, "s", bodiesN("new", 0, 3)...)
	_, dc := streamConsumer(t, b, "s", 10, time.Unix(ts.Unix(), 0)) // amqp091-go sends a time.Time as a timestamp
	readStream(t, dc, 3, bodiesN("new", 0, 3)...)
	_, before := streamConsumer(t, b, "s", 10, time.Unix(stored-60, 0))
	readStream(t, before, 0, "old0", "old1", "old2", "new0", "new1", "new2")
}

// Consumers read the same messages independently; an ack gives prefetch
// credit back and takes nothing away.
func TestStreamConsumersIndependent(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", nil)
	publishConfirmed(t, ch, "s", bodiesN("m", 0, 6)...)

	ach, a := streamConsumer(t, b, "s", 2, "first")
	bch := b.channel()
	if err := bch.Qos(10, 0, false); err != nil {
		t.Fatal(err)
	}
	// Two consumers of the stream on one channel as well.
	b1, err := bch.Consume("s", "b1", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
	if err != nil {
		t.Fatal(err)
	}
	b2, err := bch.Consume("s", "b2", false, false, false, false, amqp091.Table{"x-stream-offset": int64(3)})
	if err != nil {
		t.Fatal(err)
	}
	readStream(t, b1, 0, bodiesN("m", 0, 6)...)
	readStream(t, b2, 3, bodiesN("m", 3, 6)...)

	// a: prefetch 2, nothing acked: exactly two, then one per ack.
	d0, d1 := recv(t, a), recv(t, a)
	none(t, ach, a, "s")
	if string(d0.Body) != "m0" || string(d1.Body) != "m1" {
		t.Fatalf("a got %q %q", d0.Body, d1.Body)
	}
	d0.Ack(false)
	if d := recv(t, a); string(d.Body) != "m2" {
		t.Fatalf("after an ack a got %q", d.Body)
	}
	none(t, ach, a, "s")
	// Closing a with unacknowledged deliveries requeues nothing: the others
	// see nothing again, a new consumer reads everything again.
	ach.Close()
	none(t, bch, b1, "s")
	none(t, bch, b2, "s")
	_, again := streamConsumer(t, b, "s", 100, "first")
	readStream(t, again, 0, bodiesN("m", 0, 6)...)
	if err := bch.Cancel("b1", false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "s", "m6")
	readStream(t, b2, 6, "m6")
	readStream(t, again, 6, "m6")
}

// A stream and its messages survive a clean restart and a crash.
func TestStreamSurvivesRestart(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", amqp091.Table{"x-max-age": "7D"})
	publishConfirmed(t, ch, "s", bodiesN("m", 0, 5)...)
	_, dc := streamConsumer(t, b, "s", 10, "first")
	readStream(t, dc, 0, bodiesN("m", 0, 5)...)
	b.restart()
	ch = b.channel()
	// Redeclared as it was: the same stream (other arguments are inequivalent).
	declareStream(t, ch, "s", amqp091.Table{"x-max-age": "7D"})
	if err := exception(t, ch, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("s", true, false, false, false, nil)
		return err
	}); !isCode(err, 406) {
		t.Fatalf("redeclare as a classic queue: %v", err)
	}
	ch = b.channel()
	publishConfirmed(t, ch, "s", "m5")
	b.crash()
	b.start()
	_, dc = streamConsumer(t, b, "s", 10, "first")
	readStream(t, dc, 0, bodiesN("m", 0, 6)...)
}

// The refusals RabbitMQ makes for streams, with its codes and texts.
func TestStreamRefusals(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	for _, c := range []struct {
		name                           string
		durable, autoDelete, exclusive bool
		args                           amqp091.Table
		text                           string
	}{
		{"nd", false, false, false, nil, "invalid property 'non-durable' for queue 'nd' in vhost '/'"},
		{"ad", true, true, false, nil, "invalid property 'auto-delete' for queue 'ad' in vhost '/'"},
		{"ex", true, false, true, nil, "invalid property 'exclusive' for queue 'ex' in vhost '/'"},
		{"ttl", true, false, false, amqp091.Table{"x-message-ttl": int32(5)}, "invalid arg 'x-message-ttl'"},
		{"maxlen", true, false, false, amqp091.Table{"x-max-length": int32(5)}, "invalid arg 'x-max-length'"},
		{"age", true, false, false, amqp091.Table{"x-max-age": "7 days"}, "invalid arg 'x-max-age'"},
		{"bytes", true, false, false, amqp091.Table{"x-max-length-bytes": "big"}, "invalid arg 'x-max-length-bytes'"},
	} {
		args := amqp091.Table{"x-queue-type": "stream"}
		for k, v := range c.args {
			args[k] = v
		}
		err := exception(t, ch, func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclare(c.name, c.durable, c.autoDelete, c.exclusive, false, args)
			return err
		})
		if !isCode(err, 406) || !strings.Contains(err.Error(), c.text) {
			t.Errorf("declare %s: %v, want 406 %q", c.name, err, c.text)
		}
		ch = b.channel()
	}
	declareStream(t, ch, "s", nil)
	publishConfirmed(t, ch, "s", "m0")

	// Without a prefetch: 406 on the channel.
	ch = b.channel()
	err := exception(t, ch, func(ch *amqp091.Channel) error {
		_, err := ch.Consume("s", "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
		return err
	})
	if !isCode(err, 406) || !strings.Contains(err.Error(), "consumer prefetch count is not set for 'queue 's' in vhost '/''") {
		t.Errorf("consume without prefetch: %v", err)
	}
	// A bad offset: 406.
	for _, off := range []any{"middle", int64(-1), 1.5} {
		ch = b.channel()
		ch.Qos(5, 0, false)
		err = exception(t, ch, func(ch *amqp091.Channel) error {
			_, err := ch.Consume("s", "", false, false, false, false, amqp091.Table{"x-stream-offset": off})
			return err
		})
		if !isCode(err, 406) || !strings.Contains(err.Error(), "invalid arg 'x-stream-offset'") {
			t.Errorf("consume from %v: %v", off, err)
		}
	}
	// Purge: 406.
	ch = b.channel()
	if err := exception(t, ch, func(ch *amqp091.Channel) error { _, err := ch.QueuePurge("s", false); return err }); !isCode(err, 406) {
		t.Errorf("purge: %v", err)
	}

	// Connection exceptions (540 NOT_IMPLEMENTED), each on its own connection.
	connErr := func(what, text string, do func(ch *amqp091.Channel) error) {
		t.Helper()
		c := b.dial()
		closed := c.NotifyClose(make(chan *amqp091.Error, 1))
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		err = do(ch)
		select {
		case e := <-closed:
			if e == nil || e.Code != 540 || !strings.Contains(e.Reason, text) {
				t.Errorf("%s: connection closed with %v (do: %v), want 540 %q", what, e, err, text)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the connection stayed open (%v)", what, err)
		}
	}
	connErr("no-ack consume", "automatic acknowledgement not supported by stream queues queue 's' in vhost '/'", func(ch *amqp091.Channel) error {
		ch.Qos(5, 0, false)
		_, err := ch.Consume("s", "", true, false, false, false, nil)
		return err
	})
	connErr("global qos", "queue 's' in vhost '/' does not support global qos", func(ch *amqp091.Channel) error {
		ch.Qos(5, 0, false)
		ch.Qos(5, 0, true)
		_, err := ch.Consume("s", "", false, false, false, false, nil)
		return err
	})
	connErr("basic.get", "basic.get not supported by stream queues queue 's' in vhost '/'", func(ch *amqp091.Channel) error {
		_, _, err := ch.Get("s", false)
		return err
	})
	for _, requeue := range []bool{true, false} {
		connErr(fmt.Sprint("nack requeue=", requeue), "basic.nack and basic.reject not supported by stream queues queue 's' in vhost '/'", func(ch *amqp091.Channel) error {
			ch.Qos(5, 0, false)
			dc, err := ch.Consume("s", "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
			if err != nil {
				return err
			}
			return recv(t, dc).Nack(false, requeue)
		})
	}
	// The stream still has its message, from the start.
	_, dc := streamConsumer(t, b, "s", 5, "first")
	readStream(t, dc, 0, "m0")
}

// x-max-length-bytes moves the log start past the oldest messages while
// the stream holds more than that many stored bytes.
func TestStreamMaxLengthBytes(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	body := strings.Repeat("x", 1000)
	declareStream(t, ch, "s", amqp091.Table{"x-max-length-bytes": int64(10_000)})
	var bodies []string
	for i := range 40 {
		bodies = append(bodies, fmt.Sprintf("%02d%s", i, body))
	}
	publishConfirmed(t, ch, "s", bodies...)
	q := b.srv.vhosts["/"].queue("s")
	waitUntil(t, "the log start moved", func() bool { return q.logStart() > 0 })
	start := q.logStart()
	// What is left is at most 10 000 stored bytes, and one more message
	// would have passed it.
	sizes := entrySizes(t, b, q.topic, start-1, 40)
	kept := int64(0)
	for _, s := range sizes[1:] {
		kept += s
	}
	if kept > 10_000 || kept+sizes[0] <= 10_000 {
		t.Fatalf("log start %d keeps %d bytes (the message before it: %d)", start, kept, sizes[0])
	}
	_, dc := streamConsumer(t, b, "s", 100, "first")
	readStream(t, dc, start, bodies[start:]...)
	if qs, err := ch.QueueDeclarePassive("s", true, false, false, false, nil); err != nil || int64(qs.Messages) != 40-start {
		t.Fatalf("declare-ok: %+v %v, want %d messages", qs, err, 40-start)
	}
	// The log start is kept over a restart.
	waitUntil(t, "the log start written", func() bool { return q.savedFloor.Load() == start })
	b.crash()
	b.start()
	_, dc = streamConsumer(t, b, "s", 100, int64(0))
	readStream(t, dc, start, bodies[start:]...)
}

func entrySizes(t *testing.T, b *broker, topic string, from, to int64) []int64 {
	t.Helper()
	var out []int64
	for o := from; o < to; o++ {
		r, err := b.st.GetMessage(topic, queueID, o, 1, 0, nil)
		if err != nil || len(r.Records) != 1 {
			t.Fatalf("entry %d: %v", o, err)
		}
		out = append(out, int64(len(r.Records[0])))
		r.Release()
	}
	return out
}

// x-max-age moves the log start past the messages stored longer ago.
func TestStreamMaxAge(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", amqp091.Table{"x-max-age": "1s"})
	publishConfirmed(t, ch, "s", bodiesN("old", 0, 5)...)
	q := b.srv.vhosts["/"].queue("s")
	waitUntil(t, "the old messages aged out", func() bool { return q.logStart() == 5 })
	publishConfirmed(t, ch, "s", "new0")
	_, dc := streamConsumer(t, b, "s", 100, "first")
	readStream(t, dc, 5, "new0")
}

// A stream holds nothing against the store's retention (its own is
// x-max-age and x-max-length-bytes): it is not among the queue holds.
func TestStreamHoldsNothing(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", nil)
	if _, err := ch.QueueDeclare("classic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	h := b.srv.holds()
	if _, ok := h[b.srv.vhosts["/"].queue("s").topic]; ok {
		t.Errorf("the stream is held: %v", h)
	}
	if _, ok := h[b.srv.vhosts["/"].queue("classic").topic]; !ok {
		t.Errorf("the classic queue is not held: %v", h)
	}
}

// A message's expiration does not apply in a stream (RabbitMQ's streams
// ignore it too): the expiry sweep leaves the stream alone.
func TestStreamIgnoresExpiration(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", nil)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dconf, err := ch.PublishWithDeferredConfirm("", "s", false, false, amqp091.Publishing{ContentType: "text/plain", Expiration: "1", Body: []byte("m0")})
	if err != nil || !dconf.Wait() {
		t.Fatalf("publish: %v", err)
	}
	q := b.srv.vhosts["/"].queue("s")
	q.expireHead(nowMs() + 60_000)
	if s := q.logStart(); s != 0 {
		t.Fatalf("the expiry sweep moved the log start to %d", s)
	}
	_, dc := streamConsumer(t, b, "s", 5, "first")
	readStream(t, dc, 0, "m0")
}

// A stream over a Keel topic (x-keel-topic) is that topic's log from its
// start: records written before the declare are there, at their offsets,
// whichever protocol wrote them; a Kafka batch of an earlier release (one
// entry) gives each of its records with that entry's offset.
func TestStreamOverKeelTopic(t *testing.T) {
	b := startBroker(t)
	putRocketMQ(t, b.st, "orders", 0)
	waitEntries(t, b.st, "orders", 1)
	ch := b.channel()
	declareStream(t, ch, "feed", amqp091.Table{ArgKeelTopic: "orders"})
	var recs []translate.KafkaRecord
	for i := range 2 {
		recs = append(recs, translate.KafkaRecord{Offset: int64(i), Timestamp: 5000, Value: fmt.Appendf(nil, "kafka-%d", i)})
	}
	rec, err := record.AppendEnvelope(nil, record.KafkaBatch, 2, []record.Dest{{Topic: "orders", QueueID: 0}}, translate.AppendKafkaBatch(nil, recs))
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := b.st.PutRecord(context.Background(), rec); !r.OK() {
		t.Fatal(r.Status, r.Err)
	}
	_, dc := streamConsumer(t, b, "feed", 2, "first")
	putRocketMQ(t, b.st, "orders", 2)
	for _, w := range []struct {
		body string
		off  int64
	}{{"rmq-0", 0}, {"kafka-0", 1}, {"kafka-1", 1}, {"rmq-2", 2}} {
		d := recv(t, dc)
		if string(d.Body) != w.body || d.Headers["x-stream-offset"] != w.off {
			t.Fatalf("got %q at %v, want %q at %d", d.Body, d.Headers["x-stream-offset"], w.body, w.off)
		}
		d.Ack(false)
	}
}

// A stream has nothing unsettled: operators see no oldest unsettled
// message however old its messages are.
func TestStreamInfo(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", nil)
	publishConfirmed(t, ch, "s", "m0", "m1")
	_, dc := streamConsumer(t, b, "s", 5, "first")
	d := recv(t, dc)
	recv(t, dc)
	info := func() QueueInfo {
		for _, i := range b.srv.Queues() {
			if i.Name == "s" {
				return i
			}
		}
		t.Fatal("no queue s")
		return QueueInfo{}
	}
	if i := info(); i.Type != "stream" || i.Ready != 2 || i.Unacked != 2 || i.Consumers != 1 || i.OldestUnsettledAgeMs != -1 {
		t.Fatalf("info %+v", i)
	}
	d.Ack(false)
	waitUntil(t, "the ack counted", func() bool { return info().Unacked == 1 })
}

// The byte count of x-max-length-bytes follows a log start another rule
// moved (x-max-age) without counting the stream again from the start.
func TestStreamByteCountFollowsLogStart(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", amqp091.Table{"x-max-length-bytes": int64(1 << 30), "x-max-age": "1Y"})
	publishConfirmed(t, ch, "s", bodiesN("m", 0, 10)...)
	q := b.srv.vhosts["/"].queue("s")
	if keep, err := q.streamBytesFrom(0, 10, maxStreamScan); err != nil || keep != 0 {
		t.Fatalf("first count: %d %v", keep, err)
	}
	sizes := entrySizes(t, b, q.topic, 0, 10)
	var rest int64
	for _, s := range sizes[3:] {
		rest += s
	}
	q.mu.Lock()
	q.floor = 3 // as x-max-age moves it (so that the server's own rounds agree)
	q.mu.Unlock()
	if keep, err := q.streamBytesFrom(3, 10, 0); err != nil || keep != 3 {
		t.Fatalf("after the log start moved: %d %v", keep, err)
	}
	q.mu.Lock()
	from, to, total := q.stream.from, q.stream.to, q.stream.bytes
	q.mu.Unlock()
	if from != 3 || to != 10 || total != rest {
		t.Fatalf("count [%d, %d) = %d, want [3, 10) = %d", from, to, total, rest)
	}
}

// A stream takes what an exchange routes to it and what a transaction
// commits, as any queue.
func TestStreamPublishPaths(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareStream(t, ch, "s", nil)
	if err := ch.QueueBind("s", "", "amq.fanout", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dconf, err := ch.PublishWithDeferredConfirm("amq.fanout", "any", false, false, amqp091.Publishing{ContentType: "text/plain", Body: []byte("routed")})
	if err != nil || !dconf.Wait() {
		t.Fatalf("publish: %v", err)
	}
	tx := b.channel()
	if err := tx.Tx(); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"tx0", "tx1"} {
		if err := tx.Publish("", "s", false, false, amqp091.Publishing{ContentType: "text/plain", Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.TxCommit(); err != nil {
		t.Fatal(err)
	}
	_, dc := streamConsumer(t, b, "s", 5, "first")
	readStream(t, dc, 0, "routed", "tx0", "tx1")
}
