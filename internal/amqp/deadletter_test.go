package amqp

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// declareDLX declares exchange "dlx" (fanout) and queue "dead" bound to it.
func declareDLX(t *testing.T, ch *amqp091.Channel) {
	t.Helper()
	if err := ch.ExchangeDeclare("dlx", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("dead", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("dead", "", "dlx", false, nil); err != nil {
		t.Fatal(err)
	}
}

// getWithin polls basic.get on q until a message comes, for up to 10 s.
func getWithin(t *testing.T, ch *amqp091.Channel, q string) amqp091.Delivery {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, ok, err := ch.Get(q, false)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing in %s after 10 s", q)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// death returns the first x-death entry of d.
func death(t *testing.T, d amqp091.Delivery) amqp091.Table {
	t.Helper()
	deaths, ok := d.Headers["x-death"].([]any)
	if !ok || len(deaths) == 0 {
		t.Fatalf("no x-death in %v", d.Headers)
	}
	e, ok := deaths[0].(amqp091.Table)
	if !ok {
		t.Fatalf("x-death[0] is %T", deaths[0])
	}
	return e
}

// A rejected message goes to the dead-letter exchange with x-death; the
// copy is durable (it survives a restart) and the original is gone.
func TestRejectDeadLetters(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareDLX(t, ch)
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp091.Table{
		"x-dead-letter-exchange": "dlx", "x-dead-letter-routing-key": "poison"}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "work", "bad")
	d, ok, err := ch.Get("work", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	got := getWithin(t, ch, "dead") // a get after the reject sees the copy
	e := death(t, got)
	if string(got.Body) != "bad" || got.RoutingKey != "poison" || got.Exchange != "dlx" || e["reason"] != "rejected" ||
		e["queue"] != "work" || e["count"] != int64(1) || got.Headers["x-first-death-reason"] != "rejected" {
		t.Fatalf("dead-lettered copy: %+v", got)
	}
	if keys, _ := e["routing-keys"].([]any); len(keys) != 1 || keys[0] != "work" {
		t.Fatalf("routing-keys %v", e["routing-keys"])
	}
	got.Nack(false, true) // back into dead
	b.restart()
	ch = b.channel()
	if d, ok, _ := ch.Get("work", false); ok {
		t.Fatalf("the rejected original came back: %q", d.Body)
	}
	if d, ok, err := ch.Get("dead", false); err != nil || !ok || string(d.Body) != "bad" {
		t.Fatalf("the copy after a restart: %v %v", ok, err)
	}
}

// x-message-ttl and per-message expiration: an expired message is not
// delivered; with a dead-letter exchange it moves there (reason expired,
// original-expiration kept) without anybody consuming the queue.
func TestTTLExpiresAndDeadLetters(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareDLX(t, ch)
	if _, err := ch.QueueDeclare("ttl", true, false, false, false, amqp091.Table{
		"x-message-ttl": int32(100), "x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("plain", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	pub := func(q, body, expiration string) {
		t.Helper()
		dc, err := ch.PublishWithDeferredConfirm("", q, false, false, amqp091.Publishing{Body: []byte(body), Expiration: expiration, DeliveryMode: 2})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %s: %v", body, err)
		}
	}
	pub("ttl", "queue-ttl", "")
	pub("plain", "short", "50")
	pub("plain", "long", "600000")
	d := getWithin(t, ch, "dead")
	if e := death(t, d); string(d.Body) != "queue-ttl" || e["reason"] != "expired" || e["queue"] != "ttl" {
		t.Fatalf("expired copy %q %v", d.Body, d.Headers)
	}
	d.Ack(false)
	// The expiry sweep drops "short" once its 50 ms have passed.
	waitUntil(t, `"short" expired`, func() bool {
		q, err := ch.QueueDeclarePassive("plain", true, false, false, false, nil)
		return err == nil && q.Messages == 1
	})
	d, ok, err := ch.Get("plain", false)
	if err != nil || !ok || string(d.Body) != "long" || d.Expiration != "600000" {
		t.Fatalf("plain: want only the unexpired message: %q %v %v", d.Body, ok, err)
	}
	if _, ok, _ := ch.Get("ttl", false); ok {
		t.Fatal("an expired message was served")
	}
	// An expiration that is not a number of milliseconds is refused (406).
	ch2 := b.channel()
	err = exception(t, ch2, func(ch *amqp091.Channel) error {
		ch.Publish("", "plain", false, false, amqp091.Publishing{Body: []byte("x"), Expiration: "soon"})
		_, err := ch.QueueDeclarePassive("plain", true, false, false, false, nil)
		return err
	})
	if !isCode(err, 406) {
		t.Fatalf("invalid expiration: %v", err)
	}
}

// x-max-length with drop-head drops (dead-letters) the oldest; with
// x-overflow=reject-publish a publish to a full queue is nacked.
func TestMaxLength(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareDLX(t, ch)
	if _, err := ch.QueueDeclare("head", true, false, false, false, amqp091.Table{
		"x-max-length": int64(2), "x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("full", true, false, false, false, amqp091.Table{
		"x-max-length": int32(2), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "head", "1", "2", "3", "4")
	for _, want := range []string{"3", "4"} {
		if d, ok, err := ch.Get("head", true); err != nil || !ok || string(d.Body) != want {
			t.Fatalf("head: %q %v %v, want %s", d.Body, ok, err, want)
		}
	}
	for _, want := range []string{"1", "2"} {
		d := getWithin(t, ch, "dead")
		if e := death(t, d); string(d.Body) != want || e["reason"] != "maxlen" {
			t.Fatalf("dropped head %q %v, want %s", d.Body, d.Headers, want)
		}
		d.Ack(false)
	}
	var acks []bool
	for i := range 4 {
		dc, err := ch.PublishWithDeferredConfirm("", "full", false, false, amqp091.Publishing{Body: []byte(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, dc.Wait())
	}
	if fmt.Sprint(acks) != "[true true false false]" {
		t.Fatalf("reject-publish confirms %v", acks)
	}
	if q, err := ch.QueueDeclarePassive("full", true, false, false, false, nil); err != nil || q.Messages != 2 {
		t.Fatalf("full: %+v %v", q, err)
	}
}

// x-delivery-limit: a message requeued more often is dead-lettered
// (reason delivery_limit), counting the returns before a restart.
func TestDeliveryLimit(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	declareDLX(t, ch)
	if _, err := ch.QueueDeclare("poison", true, false, false, false, amqp091.Table{
		"x-queue-type": "quorum", "x-delivery-limit": int32(2), "x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "poison", "p")
	for i := range 3 {
		if i == 2 { // the returns so far survive a restart
			b.restart()
			ch = b.channel()
		}
		d, ok, err := ch.Get("poison", false)
		if err != nil || !ok || d.Redelivered != (i > 0) {
			t.Fatalf("delivery %d: %v %v redelivered=%v", i, ok, err, d.Redelivered)
		}
		d.Nack(false, true)
	}
	d := getWithin(t, ch, "dead")
	if e := death(t, d); string(d.Body) != "p" || e["reason"] != "delivery_limit" {
		t.Fatalf("over the delivery limit: %q %v", d.Body, d.Headers)
	}
	if _, ok, _ := ch.Get("poison", false); ok {
		t.Fatal("the message stayed in its queue")
	}
}

// Invalid or unsupported queue arguments are refused with 406; quorum
// queues must be durable and shared.
func TestQueueArgumentsChecked(t *testing.T) {
	b := startBroker(t)
	for _, c := range []struct {
		args               amqp091.Table
		durable, exclusive bool
	}{
		{amqp091.Table{"x-message-ttl": int32(-1)}, true, false},
		{amqp091.Table{"x-message-ttl": "10"}, true, false},
		{amqp091.Table{"x-max-length": int32(-5)}, true, false},
		{amqp091.Table{"x-overflow": "reject-everything"}, true, false},
		{amqp091.Table{"x-max-length-bytes": int32(-1)}, true, false},
		{amqp091.Table{"x-single-active-consumer": int32(1)}, true, false},
		{amqp091.Table{"x-queue-type": "stream"}, false, false},
		{amqp091.Table{"x-queue-type": "lazy"}, true, false},
		{amqp091.Table{"x-dead-letter-routing-key": "k"}, true, false},
		{amqp091.Table{"x-queue-type": "quorum"}, false, false},
		{amqp091.Table{"x-queue-type": "quorum"}, true, true},
	} {
		ch := b.channel()
		if _, err := ch.QueueDeclare("args", c.durable, false, c.exclusive, false, c.args); !isCode(err, 406) {
			t.Errorf("%v durable=%v exclusive=%v: %v, want 406", c.args, c.durable, c.exclusive, err)
		}
	}
	ch := b.channel()
	for _, qt := range []string{"classic", "quorum", "stream"} {
		if _, err := ch.QueueDeclare("q-"+qt, true, false, false, false, amqp091.Table{"x-queue-type": qt}); err != nil {
			t.Fatalf("%s: %v", qt, err)
		}
	}
}

// The expiry sweep reads a queue's head once and then leaves it alone
// while nothing changes and the head never expires (after a restart every
// queue may hold expiring messages, so each is looked at once).
func TestSweepSkipsHeadsThatNeverExpire(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("plain", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "plain", "forever")
	b.restart()
	q := b.srv.vhosts["/"].queue("plain")
	waitUntil(t, "the sweep looked at the head", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.nextExpiry == math.MaxInt64
	})
	reads := b.st.Stats().Gets
	time.Sleep(3 * expirySweepInterval)
	if got := b.st.Stats().Gets; got != reads {
		t.Fatalf("the sweep read the store %d more times", got-reads)
	}
}

// The dead-letter copy is stored before the original is settled: while
// the store refuses writes (a full disk) a rejected message stays in its
// queue, even once the acknowledgement state is written and the broker is
// killed; after the restart, with space back, it is served again.
func TestDeadLetterCopyBeforeSettle(t *testing.T) {
	mem := vfs.NewMem()
	var logs syncBuf
	b := &broker{t: t, dir: t.TempDir(), logs: &logs, storeCfg: func(c *store.Config) {
		c.FS = mem
		c.RetentionCheckInterval = 10 * time.Millisecond
		c.DiskReserveBytes = 0
	}}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	declareDLX(t, ch)
	if _, err := ch.QueueDeclare("work", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "work", "precious")
	d, ok, err := ch.Get("work", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	total, free, _ := mem.DiskUsage(b.dir)
	mem.SetCapacity((total - free) * 100 / 95) // above the hard limit: writes refused
	waitUntil(t, "the store to refuse writes", func() bool { return b.st.Stats().DiskFull })
	if err := d.Reject(false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the copy to be refused", func() bool { return strings.Contains(logs.String(), "dead-letter copy not stored") })
	if err := b.srv.vhosts["/"].saveAcks(); err != nil { // as the persist loop does
		t.Fatal(err)
	}
	b.crash()
	mem.SetCapacity(vfs.DefaultMemCapacity)
	b.start()
	ch = b.channel()
	d, ok, err = ch.Get("work", true)
	if err != nil || !ok || string(d.Body) != "precious" || !d.Redelivered {
		t.Fatalf("after the crash the rejected message is gone from its queue: %v %v %q", ok, err, d.Body)
	}
}

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// x-expires: a queue unused for that long (no consumer, no basic.get, no
// redeclare) is deleted; a consumer keeps it.
func TestQueueExpires(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("temp", true, false, false, false, amqp091.Table{"x-expires": int32(150)}); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "temp", "m")
	if _, err := ch.Consume("temp", "c", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // twice x-expires with a consumer
	if _, err := ch.QueueDeclarePassive("temp", true, false, false, false, nil); err != nil {
		t.Fatalf("a queue with a consumer expired: %v", err)
	}
	if err := ch.Cancel("c", false); err != nil {
		t.Fatal(err)
	}
	cancelled := time.Now()
	q := b.srv.vhosts["/"].queue("temp")
	waitUntil(t, "the unused queue to expire", func() bool { return b.srv.vhosts["/"].queue("temp") == nil })
	if d := time.Since(cancelled); d < 150*time.Millisecond {
		t.Fatalf("deleted %v after its consumer went, before x-expires", d)
	}
	q.mu.Lock()
	gone := q.gone
	q.mu.Unlock()
	if !gone {
		t.Fatal("the expired queue was not deleted")
	}
	if _, err := ch.QueueDeclarePassive("temp", true, false, false, false, nil); !isCode(err, 404) {
		t.Fatalf("after x-expires: %v, want 404", err)
	}
	ch = b.channel()
	if _, err := ch.QueueDeclare("bad", true, false, false, false, amqp091.Table{"x-expires": int32(0)}); !isCode(err, 406) {
		t.Fatalf("x-expires 0: %v, want 406", err)
	}
}
