package amqp

import (
	"fmt"
	"slices"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// consumeOn opens a channel with prefetch on b and consumes queue with args.
func consumeOn(t *testing.T, b *broker, queue, tag string, prefetch int, args amqp091.Table) (*amqp091.Channel, <-chan amqp091.Delivery) {
	t.Helper()
	ch := b.channel()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume(queue, tag, false, false, false, false, args)
	if err != nil {
		t.Fatal(err)
	}
	return ch, ds
}

func bodies(t *testing.T, c <-chan amqp091.Delivery, n int) []string {
	t.Helper()
	var out []string
	for range n {
		out = append(out, string(recv(t, c).Body))
	}
	return out
}

// x-single-active-consumer: every basic.consume succeeds, only the first
// registered consumer gets deliveries; when its channel closes its
// unacknowledged messages go, in order and flagged redelivered, to the
// next one, and when that one cancels the third takes over.
func TestSingleActiveConsumer(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("sac", true, false, false, false, amqp091.Table{"x-single-active-consumer": true}); err != nil {
		t.Fatal(err)
	}
	chA, a := consumeOn(t, b, "sac", "A", 4, nil)
	chB, bd := consumeOn(t, b, "sac", "B", 10, nil)
	chC, c := consumeOn(t, b, "sac", "C", 10, nil)
	if q, err := ch.QueueDeclarePassive("sac", true, false, false, false, nil); err != nil || q.Consumers != 3 {
		t.Fatalf("consumers: %+v %v", q, err)
	}
	publishConfirmed(t, ch, "sac", "1", "2", "3", "4")
	got := bodies(t, a, 4)
	if fmt.Sprint(got) != "[1 2 3 4]" {
		t.Fatalf("active consumer got %v", got)
	}
	none(t, chB, bd, "sac")
	none(t, chC, c, "sac")
	// A (prefetch 4) holds 1-4 unacknowledged, 5 waits; A's channel
	// closes: B gets 1-4 again first, then 5.
	publishConfirmed(t, ch, "sac", "5")
	none(t, chB, bd, "sac")
	chA.Close()
	for _, want := range []string{"1", "2", "3", "4", "5"} {
		d := recv(t, bd)
		if string(d.Body) != want || d.Redelivered != (want != "5") {
			t.Fatalf("after the close: %q redelivered=%v, want %s", d.Body, d.Redelivered, want)
		}
		d.Ack(false)
	}
	none(t, chC, c, "sac")
	// B cancels: C becomes active.
	if err := chB.Cancel("B", false); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "sac", "6")
	if d := recv(t, c); string(d.Body) != "6" {
		t.Fatalf("after the cancel: %q", d.Body)
	}
	if _, err := ch.QueueDeclare("sac-bad", true, false, false, false, amqp091.Table{"x-single-active-consumer": "yes"}); !isCode(err, 406) {
		t.Fatalf("x-single-active-consumer=\"yes\": %v, want 406", err)
	}
}

// Consumer priorities (x-priority): deliveries go to the consumers of the
// highest priority while they have prefetch room, in turn among equals;
// a lower one gets a message only when none of them has room.
func TestConsumerPriorities(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("prio", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	chLow, low := consumeOn(t, b, "prio", "low", 10, nil)
	_, hi1 := consumeOn(t, b, "prio", "hi1", 2, amqp091.Table{"x-priority": int32(5)})
	_, hi2 := consumeOn(t, b, "prio", "hi2", 2, amqp091.Table{"x-priority": int64(5)})
	publishConfirmed(t, ch, "prio", "1", "2", "3", "4")
	if g1, g2 := bodies(t, hi1, 2), bodies(t, hi2, 2); fmt.Sprint(g1, g2) != "[1 3] [2 4]" {
		t.Fatalf("high-priority consumers got %v and %v", g1, g2)
	}
	none(t, chLow, low, "prio")
	publishConfirmed(t, ch, "prio", "5") // both high ones are full
	if d := recv(t, low); string(d.Body) != "5" {
		t.Fatalf("low-priority consumer got %q", d.Body)
	}
	bad := b.channel()
	if err := exception(t, bad, func(c *amqp091.Channel) error {
		_, err := c.Consume("prio", "", false, false, false, false, amqp091.Table{"x-priority": "high"})
		return err
	}); !isCode(err, 406) {
		t.Fatalf("x-priority=\"high\": %v, want 406", err)
	}
}

// publishAcks publishes bodies to queue on a confirming channel and
// returns each confirm.
func publishAcks(t *testing.T, ch *amqp091.Channel, queue string, bodies ...string) []bool {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var acks []bool
	for _, body := range bodies {
		dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, dc.Wait())
	}
	return acks
}

// x-max-length-bytes counts the bodies of ready messages: drop-head
// dead-letters from the head (also with the count rebuilt after a
// restart), reject-publish nacks a publish that would pass the limit and
// counts neither unacknowledged messages nor, once requeued, leaves them
// out; reject-publish-dlx also dead-letters the refused message.
func TestMaxLengthBytes(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareDLX(t, ch)
	if _, err := ch.QueueDeclare("bytes-head", true, false, false, false, amqp091.Table{
		"x-max-length-bytes": int32(10), "x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "bytes-head", "aaaa", "bbbb", "cccc")
	if d := getWithin(t, ch, "dead"); string(d.Body) != "aaaa" || death(t, d)["reason"] != "maxlen" {
		t.Fatalf("dropped %q %v", d.Body, d.Headers)
	} else {
		d.Ack(false)
	}
	if n := depth(t, ch, "bytes-head"); n != 2 {
		t.Fatalf("bytes-head holds %d messages, want 2", n)
	}
	b.restart()
	ch = b.channel()
	publishConfirmed(t, ch, "bytes-head", "dd") // 10 bytes: at the limit
	if n := depth(t, ch, "bytes-head"); n != 3 {
		t.Fatalf("bytes-head holds %d messages, want 3", n)
	}
	publishConfirmed(t, ch, "bytes-head", "e")
	if d := getWithin(t, ch, "dead"); string(d.Body) != "bbbb" {
		t.Fatalf("dropped %q after the restart, want bbbb", d.Body)
	} else {
		d.Ack(false)
	}
	for _, want := range []string{"cccc", "dd", "e"} {
		if d, ok, err := ch.Get("bytes-head", true); err != nil || !ok || string(d.Body) != want {
			t.Fatalf("bytes-head: %q %v %v, want %s", d.Body, ok, err, want)
		}
	}

	if _, err := ch.QueueDeclare("bytes-full", true, false, false, false, amqp091.Table{
		"x-max-length-bytes": int64(10), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if acks := publishAcks(t, ch, "bytes-full", "666666", "4444", "1"); fmt.Sprint(acks) != "[true true false]" {
		t.Fatalf("reject-publish confirms %v", acks)
	}
	d, ok, err := ch.Get("bytes-full", false) // 6 bytes unacknowledged: not counted
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if acks := publishAcks(t, ch, "bytes-full", "55555", "22"); fmt.Sprint(acks) != "[true false]" {
		t.Fatalf("reject-publish confirms with one unacknowledged %v", acks)
	}
	d.Nack(false, true) // ready again: 15 bytes
	if acks := publishAcks(t, ch, "bytes-full", ""); fmt.Sprint(acks) != "[false]" {
		t.Fatalf("reject-publish confirm after a requeue %v", acks)
	}

	if _, err := ch.QueueDeclare("bytes-dlx", true, false, false, false, amqp091.Table{
		"x-max-length": int32(1), "x-overflow": "reject-publish-dlx", "x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	if acks := publishAcks(t, ch, "bytes-dlx", "x", "y"); fmt.Sprint(acks) != "[true false]" {
		t.Fatalf("reject-publish-dlx confirms %v", acks)
	}
	if d := getWithin(t, ch, "dead"); string(d.Body) != "y" || death(t, d)["reason"] != "maxlen" || death(t, d)["queue"] != "bytes-dlx" {
		t.Fatalf("refused publish dead-lettered as %q %v", d.Body, d.Headers)
	}
	if n := depth(t, ch, "bytes-dlx"); n != 1 {
		t.Fatalf("bytes-dlx holds %d messages, want 1", n)
	}
}

func deliveryCount(d amqp091.Delivery) any { return d.Headers["x-delivery-count"] }

// x-delivery-count on redeliveries from a quorum queue: absent on the
// first delivery, 1 on the first redelivery, one more on each return,
// kept across a clean restart (the close's return counted); after a crash
// a message with no return recorded is redelivered with 1. A classic
// queue sends no such header.
func TestDeliveryCountHeader(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("qq", true, false, false, false, amqp091.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("classic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "qq", "m")
	publishConfirmed(t, ch, "classic", "m")
	for i := range 3 {
		d := getWithin(t, ch, "qq")
		if want := any(int64(i)); (i == 0 && deliveryCount(d) != nil) || (i > 0 && deliveryCount(d) != want) || d.Redelivered != (i > 0) {
			t.Fatalf("delivery %d: x-delivery-count %v redelivered=%v", i, deliveryCount(d), d.Redelivered)
		}
		d.Nack(false, true)
		c := getWithin(t, ch, "classic")
		if _, ok := c.Headers["x-delivery-count"]; ok {
			t.Fatalf("classic queue delivery %d has x-delivery-count", i)
		}
		c.Nack(false, true)
	}
	getWithin(t, ch, "qq") // the fourth delivery, unacknowledged at the restart: a return
	b.restart()
	ch = b.channel()
	if d := getWithin(t, ch, "qq"); deliveryCount(d) != int64(4) || !d.Redelivered {
		t.Fatalf("after a restart: x-delivery-count %v redelivered=%v, want 4", deliveryCount(d), d.Redelivered)
	} else {
		d.Ack(false)
	}
	publishConfirmed(t, ch, "qq", "c")
	getWithin(t, ch, "qq") // delivered, then the broker crashes
	b.crash()
	b.start()
	ch = b.channel()
	d := getWithin(t, ch, "qq")
	if string(d.Body) == "m" { // its ack may not have been written before the crash
		d.Ack(false)
		d = getWithin(t, ch, "qq")
	}
	if string(d.Body) != "c" || deliveryCount(d) != int64(1) || !d.Redelivered {
		t.Fatalf("after a crash: %q x-delivery-count %v redelivered=%v, want 1", d.Body, deliveryCount(d), d.Redelivered)
	}
	d.Nack(false, true)
	if d := getWithin(t, ch, "qq"); deliveryCount(d) != int64(2) {
		t.Fatalf("after a crash and a return: x-delivery-count %v, want 2", deliveryCount(d))
	}
}

func publishPrio(t *testing.T, ch *amqp091.Channel, queue string, msgs map[string]uint8, order []string) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, body := range order {
		dc, err := ch.PublishWithDeferredConfirm("", queue, false, false, amqp091.Publishing{
			DeliveryMode: amqp091.Persistent, Priority: msgs[body], Body: []byte(body)})
		if err != nil {
			t.Fatal(err)
		}
		if !dc.Wait() {
			t.Fatalf("publish %q nacked", body)
		}
	}
}

// x-max-priority: a message of higher priority (capped at the queue's
// maximum) is served first, in publish order among equals; a requeued one
// goes back to its place; the order holds after a restart and after a
// crash; bad values are 406.
func TestMessagePriorities(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("pq", true, false, false, false, amqp091.Table{"x-max-priority": int32(5)}); err != nil {
		t.Fatal(err)
	}
	prio := map[string]uint8{"a0": 0, "b3": 3, "c1": 1, "d9": 9, "e3": 3, "f0": 0, "g5": 5}
	publishPrio(t, ch, "pq", prio, []string{"a0", "b3", "c1", "d9", "e3", "f0", "g5"})
	restarted := false
	get := func(want string, redelivered bool) amqp091.Delivery {
		t.Helper()
		d, ok, err := ch.Get("pq", false)
		// After a restart every message older than the newest one
		// delivered before it is flagged redelivered (see priority.go).
		if err != nil || !ok || string(d.Body) != want || (!restarted && d.Redelivered != redelivered) {
			t.Fatalf("got %q ok=%v err=%v redelivered=%v, want %s", d.Body, ok, err, d.Redelivered, want)
		}
		return d
	}
	// d9 is capped at 5: published before g5, served before it.
	d := get("d9", false)
	get("g5", false).Ack(false)
	d.Nack(false, true) // back before the other 5s and 3s
	get("d9", true).Ack(false)
	depth(t, ch, "pq") // the acks arrived
	b.restart()
	ch = b.channel()
	restarted = true
	get("b3", false).Ack(false)
	publishPrio(t, ch, "pq", map[string]uint8{"h4": 4}, []string{"h4"})
	get("h4", false).Ack(false)
	get("e3", false) // unacknowledged at the crash
	b.crash()
	b.start()
	ch = b.channel()
	// Acks not yet written at the crash may come again; the order holds.
	var got []string
	for {
		d, ok, err := ch.Get("pq", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got = append(got, string(d.Body))
	}
	// The order they must come in if all are there: capped priority,
	// then publish order.
	all := []string{"d9", "g5", "h4", "b3", "e3", "c1", "a0", "f0"}
	var want []string
	for _, m := range all {
		if slices.Contains(got, m) || slices.Contains([]string{"e3", "c1", "a0", "f0"}, m) {
			want = append(want, m)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after a crash: %v, want %v", got, want)
	}
	for _, bad := range []any{int32(256), int32(-1), "5"} {
		c := b.channel()
		if _, err := c.QueueDeclare("pq-bad", true, false, false, false, amqp091.Table{"x-max-priority": bad}); !isCode(err, 406) {
			t.Fatalf("x-max-priority %v: %v, want 406", bad, err)
		}
	}
	c := b.channel()
	if _, err := c.QueueDeclare("pq-quorum", true, false, false, false, amqp091.Table{"x-max-priority": int32(3), "x-queue-type": "quorum"}); !isCode(err, 406) {
		t.Fatalf("x-max-priority on a quorum queue: %v, want 406", err)
	}
}

// waitDepth polls until queue holds n ready messages.
func waitDepth(t *testing.T, ch *amqp091.Channel, queue string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for depth(t, ch, queue) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s does not hold %d messages after 10 s", queue, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Per-queue x-message-ttl and the expiration property keep working with
// priorities, single active consumer and x-max-length-bytes: expired
// messages are dead-lettered (the highest priority first) and no longer
// count towards the byte limit.
func TestExpiryWithQueueFeatures(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareDLX(t, ch)
	for name, args := range map[string]amqp091.Table{
		"ttl-prio":  {"x-max-priority": int32(3), "x-message-ttl": int32(40)},
		"ttl-sac":   {"x-single-active-consumer": true, "x-message-ttl": int32(40)},
		"ttl-bytes": {"x-max-length-bytes": int32(5), "x-overflow": "reject-publish", "x-message-ttl": int32(40)},
		"exp-prio":  {"x-max-priority": int32(3)},
	} {
		args["x-dead-letter-exchange"] = "dlx"
		if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatal(name, err)
		}
	}
	publishPrio(t, ch, "ttl-prio", map[string]uint8{"low": 0, "high": 2}, []string{"low", "high"})
	for _, want := range []string{"high", "low"} {
		if d := getWithin(t, ch, "dead"); string(d.Body) != want || death(t, d)["reason"] != "expired" || death(t, d)["queue"] != "ttl-prio" {
			t.Fatalf("ttl-prio dead-lettered %q %v, want %s", d.Body, d.Headers, want)
		} else {
			d.Ack(false)
		}
	}
	publishConfirmed(t, ch, "ttl-sac", "s")
	if d := getWithin(t, ch, "dead"); string(d.Body) != "s" || death(t, d)["queue"] != "ttl-sac" {
		t.Fatalf("ttl-sac dead-lettered %q %v", d.Body, d.Headers)
	} else {
		d.Ack(false)
	}
	if acks := publishAcks(t, ch, "ttl-bytes", "xxxx", "yy"); fmt.Sprint(acks) != "[true false]" {
		t.Fatalf("ttl-bytes confirms %v", acks)
	}
	if d := getWithin(t, ch, "dead"); string(d.Body) != "xxxx" {
		t.Fatalf("ttl-bytes dead-lettered %q", d.Body)
	} else {
		d.Ack(false)
	}
	waitDepth(t, ch, "ttl-bytes", 0)
	if acks := publishAcks(t, ch, "ttl-bytes", "yyyyy"); fmt.Sprint(acks) != "[true]" {
		t.Fatalf("ttl-bytes confirm after the expiry %v (the expired message still counted)", acks)
	}
	if d := getWithin(t, ch, "dead"); string(d.Body) != "yyyyy" {
		t.Fatalf("ttl-bytes dead-lettered %q", d.Body)
	} else {
		d.Ack(false)
	}
	// The expiration property in a priority queue: the expiring
	// high-priority message goes, the other stays.
	if err := ch.Publish("", "exp-prio", false, false, amqp091.Publishing{Priority: 3, Expiration: "30", Body: []byte("brief")}); err != nil {
		t.Fatal(err)
	}
	publishPrio(t, ch, "exp-prio", map[string]uint8{"stays": 0}, []string{"stays"})
	if d := getWithin(t, ch, "dead"); string(d.Body) != "brief" || death(t, d)["queue"] != "exp-prio" {
		t.Fatalf("exp-prio dead-lettered %q %v", d.Body, d.Headers)
	}
	if d, ok, err := ch.Get("exp-prio", true); err != nil || !ok || string(d.Body) != "stays" {
		t.Fatalf("exp-prio: %q %v %v", d.Body, ok, err)
	}
}

// A dead-letter queue's x-max-length-bytes (drop-head) holds for the
// copies dead-lettered into it.
func TestDeadLetterTargetLimited(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if err := ch.ExchangeDeclare("dlx-small", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("small", true, false, false, false, amqp091.Table{"x-max-length-bytes": int32(4)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("small", "", "dlx-small", false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("src", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "dlx-small"}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "src", "one", "two")
	for range 2 {
		getWithin(t, ch, "src").Reject(false)
	}
	waitDepth(t, ch, "src", 0)
	d := getWithin(t, ch, "small")
	if string(d.Body) != "two" {
		t.Fatalf("small holds %q first, want two (one dropped from the head)", d.Body)
	}
	if _, ok, err := ch.Get("small", false); err != nil || ok {
		t.Fatalf("small holds more: %v %v", ok, err)
	}
}
