package amqp

import (
	"errors"
	"net"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

func TestDurableQueueAndPersistentMessageSurviveRestart(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("my_durable_queue", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "my_durable_queue", "Hello, durable queue!")
	b.restart()
	ch = b.channel()
	q, err := ch.QueueDeclarePassive("my_durable_queue", true, false, false, false, nil)
	if err != nil || q.Messages != 1 {
		t.Fatalf("after restart: %+v, %v", q, err)
	}
	d, ok, err := ch.Get("my_durable_queue", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if string(d.Body) != "Hello, durable queue!" || d.DeliveryMode != amqp091.Persistent || d.ContentType != "text/plain" || d.Redelivered {
		t.Fatalf("got %+v", d)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	ch.QueueDeclarePassive("my_durable_queue", true, false, false, false, nil) // the ack was read
	b.restart()
	ch = b.channel()
	if _, ok, err := ch.Get("my_durable_queue", false); ok || err != nil {
		t.Fatalf("acked message came back: %v %v", ok, err)
	}
}

func TestRedeclareConflictAndPassiveAndExclusive(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q", false, false, false, false, nil); !isCode(err, 406) {
		t.Fatalf("conflicting redeclare: %v", err)
	}
	ch = b.channel()
	if _, err := ch.QueueDeclarePassive("nope", false, false, false, false, nil); !isCode(err, 404) {
		t.Fatalf("passive declare of a missing queue: %v", err)
	}
	ch = b.channel()
	q, err := ch.QueueDeclare("", false, false, true, false, nil)
	if err != nil || len(q.Name) < 9 || q.Name[:8] != "amq.gen-" {
		t.Fatalf("server-named: %+v %v", q, err)
	}
	other := b.channel()
	if _, err := other.QueueDeclare(q.Name, false, false, true, false, nil); !isCode(err, 405) {
		t.Fatalf("exclusive queue from another connection: %v", err)
	}
}

func isCode(err error, code int) bool {
	var e *amqp091.Error
	return errors.As(err, &e) && e.Code == code
}

func TestUnackedRedeliveredAfterConnectionClose(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	ch.QueueDeclare("work", true, false, false, false, nil)
	publishConfirmed(t, ch, "work", "a", "b")
	conn := b.dial()
	cch, _ := conn.Channel()
	ds, err := cch.Consume("work", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := recv(t, ds); string(d.Body) != "a" || d.Redelivered {
		t.Fatalf("first %q %v", d.Body, d.Redelivered)
	}
	recv(t, ds).Ack(false) // b acked, a not
	conn.Close()
	ch2 := b.channel()
	ds2, _ := ch2.Consume("work", "", false, false, false, false, nil)
	d := recv(t, ds2)
	if string(d.Body) != "a" || !d.Redelivered {
		t.Fatalf("redelivery %q redelivered=%v", d.Body, d.Redelivered)
	}
	d.Ack(false)
	none(t, ch2, ds2, "work")
}

func TestUnackedRedeliveredAfterRestart(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	ch.QueueDeclare("r", true, false, false, false, nil)
	publishConfirmed(t, ch, "r", "1", "2", "3")
	for i, want := range []string{"1", "2"} {
		d, ok, err := ch.Get("r", false)
		if !ok || err != nil || string(d.Body) != want {
			t.Fatalf("get %d: %q %v %v", i, d.Body, ok, err)
		}
		if want == "2" {
			d.Ack(false)
		}
	}
	ch.QueueDeclarePassive("r", true, false, false, false, nil) // the ack was read
	b.restart()
	ch = b.channel()
	var got []string
	for {
		d, ok, err := ch.Get("r", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if d.Redelivered != (string(d.Body) == "1") {
			t.Fatalf("%q redelivered=%v", d.Body, d.Redelivered)
		}
		got = append(got, string(d.Body))
	}
	if len(got) != 2 || got[0] != "1" || got[1] != "3" {
		t.Fatalf("after restart %q, want the unsettled 1 and 3", got)
	}
}

func TestAckNackRejectMultipleRequeue(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	ch.QueueDeclare("n", false, false, false, false, nil)
	publishConfirmed(t, ch, "n", "m1", "m2", "m3", "m4")
	ds, _ := ch.Consume("n", "c", false, false, false, false, nil)
	var d [4]amqp091.Delivery
	for i := range d {
		d[i] = recv(t, ds)
	}
	if err := d[1].Nack(true, true); err != nil { // m1, m2 back
		t.Fatal(err)
	}
	r1, r2 := recv(t, ds), recv(t, ds)
	if string(r1.Body) != "m1" || string(r2.Body) != "m2" || !r1.Redelivered || !r2.Redelivered {
		t.Fatalf("requeued %q %v, %q %v", r1.Body, r1.Redelivered, r2.Body, r2.Redelivered)
	}
	d[2].Reject(false)                                   // m3 discarded
	if err := ch.Ack(r2.DeliveryTag, true); err != nil { // m1, m2, m4 and their old tags
		t.Fatal(err)
	}
	none(t, ch, ds, "n")
	q, _ := ch.QueueDeclarePassive("n", false, false, false, false, nil)
	if q.Messages != 0 {
		t.Fatalf("%d messages left", q.Messages)
	}
	// A double ack closes the channel with 406.
	errs := ch.NotifyClose(make(chan *amqp091.Error, 1))
	ch.Ack(r2.DeliveryTag, false)
	if e := <-errs; e == nil || e.Code != 406 {
		t.Fatalf("double ack: %v", e)
	}
}

func TestPrefetchRespected(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	ch.QueueDeclare("p", false, false, false, false, nil)
	publishConfirmed(t, ch, "p", "1", "2", "3", "4", "5")
	if err := ch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, _ := ch.Consume("p", "", false, false, false, false, nil)
	first := recv(t, ds)
	recv(t, ds)
	none(t, ch, ds, "p")
	first.Ack(false)
	third := recv(t, ds)
	if string(third.Body) != "3" {
		t.Fatalf("third %q", third.Body)
	}
	none(t, ch, ds, "p")
}

func TestMandatoryUnroutableReturnedBeforeAck(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	ch.Confirm(false)
	returns := ch.NotifyReturn(make(chan amqp091.Return)) // unbuffered: the ack cannot be queued before the return is taken
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, 1))
	if err := ch.Publish("", "nowhere", true, false, amqp091.Publishing{Body: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	// amqp091-go delivers frames in order: the return must come first.
	select {
	case r := <-returns:
		if r.ReplyCode != 312 {
			t.Fatalf("return %+v", r)
		}
	case c := <-confirms:
		t.Fatalf("confirm %+v before the return", c)
	}
	if c := <-confirms; !c.Ack || c.DeliveryTag != 1 {
		t.Fatalf("confirm %+v", c)
	}
}

func TestAutoDeleteAndExclusiveQueuesGo(t *testing.T) {
	b := startBroker(t)
	conn := b.dial()
	ch, _ := conn.Channel()
	ex, _ := ch.QueueDeclare("ex", false, false, true, false, nil)
	ch.QueueDeclare("ad", false, true, false, false, nil)
	ch.Consume("ad", "t", false, false, false, false, nil)
	if err := ch.Cancel("t", false); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	ch2 := b.channel()
	for _, name := range []string{ex.Name, "ad"} {
		if _, err := ch2.QueueDeclarePassive(name, false, false, false, false, nil); !isCode(err, 404) {
			t.Fatalf("%s still there: %v", name, err)
		}
		ch2 = b.channel()
	}
}

func TestDeletedQueueDropsItsStoreTopic(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	ch.QueueDeclare("gone", true, false, false, false, nil)
	publishConfirmed(t, ch, "gone", "x")
	topic := mustTopic(t, b, "gone")
	// The same connection's next method is read once the publish is visible.
	ch.QueueDeclarePassive("gone", true, false, false, false, nil)
	if len(b.st.Queues(topic)) != 1 {
		t.Fatalf("topic %s has queues %v before the delete", topic, b.st.Queues(topic))
	}
	if n, err := ch.QueueDelete("gone", false, false, false); err != nil || n != 1 {
		t.Fatalf("delete: %d %v", n, err)
	}
	if qs := b.st.Queues(topic); len(qs) != 0 {
		t.Fatalf("topic %s still has queues %v", topic, qs)
	}
	b.restart()
	ch = b.channel()
	q, err := ch.QueueDeclare("gone", true, false, false, false, nil)
	if err != nil || q.Messages != 0 {
		t.Fatalf("redeclared after delete and restart: %+v %v", q, err)
	}
}

// TestUnackedRedeliveredAfterConsumerCrash: the consumer's socket dies
// without connection.close (a crashed process); its unacked message is
// delivered to the next consumer with redelivered set.
func TestUnackedRedeliveredAfterConsumerCrash(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	ch.QueueDeclare("crash", true, false, false, false, nil)
	publishConfirmed(t, ch, "crash", "held")
	nc, err := net.Dial("tcp", b.addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := amqp091.Open(nc, amqp091.Config{SASL: []amqp091.Authentication{&amqp091.PlainAuth{Username: "guest", Password: "guest"}}, Vhost: "/"})
	if err != nil {
		t.Fatal(err)
	}
	cch, _ := conn.Channel()
	ds, _ := cch.Consume("crash", "", false, false, false, false, nil)
	if d := recv(t, ds); string(d.Body) != "held" {
		t.Fatalf("got %q", d.Body)
	}
	nc.Close() // no connection.close: the process died
	ds2, _ := b.channel().Consume("crash", "", false, false, false, false, nil)
	if d := recv(t, ds2); string(d.Body) != "held" || !d.Redelivered {
		t.Fatalf("after the crash: %q redelivered=%v", d.Body, d.Redelivered)
	}
}

// TestRedeliveredFlagSurvivesCrash: a message handed out just before a
// crash (long before the acknowledgement state would be written) comes
// back with redelivered=true: the delivery lease was durable before the
// delivery.
func TestRedeliveredFlagSurvivesCrash(t *testing.T) {
	b := &broker{t: t, dir: t.TempDir(), ackInterval: time.Hour}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	ch.QueueDeclare("lease", true, false, false, false, nil)
	publishConfirmed(t, ch, "lease", "first", "second")
	if d, ok, err := ch.Get("lease", false); !ok || err != nil || string(d.Body) != "first" {
		t.Fatalf("get: %q %v %v", d.Body, ok, err)
	}
	b.crash()
	b.start()
	ch = b.channel()
	d, ok, err := ch.Get("lease", true)
	if !ok || err != nil || string(d.Body) != "first" || !d.Redelivered {
		t.Fatalf("after the crash: %q ok=%v redelivered=%v err=%v", d.Body, ok, d.Redelivered, err)
	}
}

// A method after a publish on the same channel sees the message, without
// confirms: basic.get finds it, queue.declare counts it, purge removes it
// (amqp091-go's TestIntegrationGetOk relies on it).
func TestMethodsAfterPublishSeeIt(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("seen", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		body := []byte{byte('a' + i)}
		if err := ch.Publish("", "seen", false, false, amqp091.Publishing{Body: body}); err != nil {
			t.Fatal(err)
		}
		d, ok, err := ch.Get("seen", true)
		if err != nil || !ok || string(d.Body) != string(body) {
			t.Fatalf("round %d: get after publish: %v %v %q", i, ok, err, d.Body)
		}
		ch.Publish("", "seen", false, false, amqp091.Publishing{Body: body})
		if q, err := ch.QueueDeclare("seen", true, false, false, false, nil); err != nil || q.Messages != 1 {
			t.Fatalf("round %d: declare after publish: %+v %v", i, q, err)
		}
		ch.Publish("", "seen", false, false, amqp091.Publishing{Body: body})
		if n, err := ch.QueuePurge("seen", false); err != nil || n != 2 {
			t.Fatalf("round %d: purge after publish: %d %v", i, n, err)
		}
	}
}
