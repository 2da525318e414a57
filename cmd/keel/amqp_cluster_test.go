package main

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// amqpGroups is a NameServer and two broker groups (masters only, as
// child processes) with their AMQP doors, on loopback ports chosen at
// run time.
type amqpGroups struct {
	namesrv string
	amqp    [2]string // broker-a's, broker-b's AMQP door
	kill    [2]func() // SIGKILL
}

func startAMQPGroups(t *testing.T) *amqpGroups {
	t.Helper()
	g := &amqpGroups{}
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	g.namesrv = ns.await(t, "the NameServer to listen", listenRE)
	dir := t.TempDir()
	for i, name := range []string{"broker-a", "broker-b"} {
		conf := "brokerClusterName=c\nbrokerName=" + name + "\nbrokerId=0\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n" +
			"kafkaNodeId=" + strconv.Itoa(i+1) + "\n"
		kafka := "" // broker-a's Kafka door registers beside its AMQP door
		if i == 0 {
			kafka = "127.0.0.1:0"
		}
		cmd, logs := startBrokerProc(t, "-n", g.namesrv, "-c", writeConf(t, conf), "--data-dir", filepath.Join(dir, name),
			"--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--http-listen", "",
			"--amqp-listen", "127.0.0.1:0", "--kafka-listen", kafka)
		g.amqp[i] = awaitLog(t, name+"'s AMQP listener", logs, amqpListenRE)
		g.kill[i] = func() { cmd.Process.Signal(syscall.SIGKILL) }
	}
	// Both doors are in the cluster's AMQP view before any client comes.
	c, err := remoting.Dial(context.Background(), g.namesrv, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "both AMQP doors and broker-a's Kafka door registered", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ac, err := namesrv.GetAMQPCluster(ctx, c, "c")
		if err != nil || len(ac.Members) != 2 || ac.Members[0].AMQPAddr != g.amqp[0] || ac.Members[1].AMQPAddr != g.amqp[1] {
			return false
		}
		kc, err := namesrv.GetKafkaCluster(ctx, c, "c")
		return err == nil && len(kc.Brokers) == 1 && kc.Brokers[0].KafkaAddr != ""
	})
	return g
}

func dialAMQP(t *testing.T, addr string) *amqp091.Connection {
	t.Helper()
	conn, err := amqp091.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func openChannel(t *testing.T, conn *amqp091.Connection) *amqp091.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// publishConfirmed publishes n persistent messages "<prefix>-<i>" to the
// default exchange with key and returns how many were acked and nacked.
func publishConfirmed(t *testing.T, ch *amqp091.Channel, key, prefix string, n int, mandatory bool) (acked, nacked int) {
	t.Helper()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	confirms := ch.NotifyPublish(make(chan amqp091.Confirmation, n))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range n {
		err := ch.PublishWithContext(ctx, "", key, mandatory, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent,
			Body: []byte(prefix + "-" + strconv.Itoa(i))})
		if err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		select {
		case c, ok := <-confirms:
			if !ok {
				t.Fatalf("channel closed after %d acks, %d nacks", acked, nacked)
			}
			if c.Ack {
				acked++
			} else {
				nacked++
			}
		case <-ctx.Done():
			t.Fatalf("confirms: %d acks, %d nacks of %d", acked, nacked, n)
		}
	}
	return acked, nacked
}

// drain receives from ds until want messages came; it returns them by body.
func drain(t *testing.T, ds <-chan amqp091.Delivery, want int) []amqp091.Delivery {
	t.Helper()
	var got []amqp091.Delivery
	timeout := time.After(60 * time.Second)
	for len(got) < want {
		select {
		case d, ok := <-ds:
			if !ok {
				t.Fatalf("deliveries ended after %d of %d", len(got), want)
			}
			got = append(got, d)
		case <-timeout:
			t.Fatalf("%d of %d deliveries", len(got), want)
		}
	}
	return got
}

// TestAMQPAcrossGroups: two broker groups, one AMQP namespace. A durable
// queue declared through broker-a lives there, one declared through
// broker-b there; a client of either door uses both: a redeclare through
// the member that does not store the queue is answered by its home (406
// on different arguments), publishes with confirms through broker-a to
// broker-b's queue are all confirmed and delivered once, consumed through
// broker-a (acks forwarded: a consumer that acks half of them and leaves
// has exactly the other half redelivered, redelivered=true, through
// broker-b), basic.get through either member; then broker-b is killed:
// new names declared at once through both members get one queue each;
// a transaction through broker-a over qa and qb (publish to both, ack of
// a qb delivery) commits both parts; a message rejected on broker-a's
// queue is dead-lettered to broker-b's; then broker-b is killed:
// publishes through broker-a to its queue are nacked, consuming it fails
// with a channel error naming broker-b, and a transaction held over the
// kill fails its commit with a channel error, its part on broker-a not
// applied.
func TestAMQPAcrossGroups(t *testing.T) {
	g := startAMQPGroups(t)
	a, b := dialAMQP(t, g.amqp[0]), dialAMQP(t, g.amqp[1])
	cha, chb := openChannel(t, a), openChannel(t, b)
	if _, err := cha.QueueDeclare("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := chb.QueueDeclare("qb", true, false, false, false, amqp091.Table{"x-max-length": int32(10000)}); err != nil {
		t.Fatal(err)
	}
	// broker-a answers for qb as broker-b does: same arguments fine, other
	// arguments 406, passive declare finds it.
	if _, err := cha.QueueDeclare("qb", true, false, false, false, amqp091.Table{"x-max-length": int32(10000)}); err != nil {
		t.Fatalf("redeclare through broker-a: %v", err)
	}
	if _, err := cha.QueueDeclarePassive("qb", true, false, false, false, nil); err != nil {
		t.Fatalf("passive declare through broker-a: %v", err)
	}
	_, err := cha.QueueDeclare("qb", true, false, false, false, amqp091.Table{"x-max-length": int32(5)})
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed {
		t.Fatalf("declare with other arguments through broker-a: %v, want 406", err)
	}
	cha = openChannel(t, a)

	// Publish through broker-a to broker-b's queue.
	const n = 200
	if acked, nacked := publishConfirmed(t, cha, "qb", "m", n, true); acked != n || nacked != 0 {
		t.Fatalf("%d acks, %d nacks of %d", acked, nacked, n)
	}
	// broker-b holds them: its own count says so.
	q, err := chb.QueueDeclarePassive("qb", true, false, false, false, nil)
	if err != nil || q.Messages != n {
		t.Fatalf("broker-b counts %d messages in qb (%v), want %d", q.Messages, err, n)
	}

	// Consume through broker-a, which does not store qb: every message
	// once; ack the first half, then leave.
	ca := dialAMQP(t, g.amqp[0])
	cc := openChannel(t, ca)
	ds, err := cc.Consume("qb", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := drain(t, ds, n)
	seen := map[string]bool{}
	for _, d := range got {
		if seen[string(d.Body)] || d.Redelivered {
			t.Fatalf("%s delivered twice or redelivered at first", d.Body)
		}
		seen[string(d.Body)] = true
	}
	acked := map[string]bool{}
	for _, d := range got[:n/2] {
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
		acked[string(d.Body)] = true
	}
	ca.Close()

	// Through broker-b (the home): exactly the other half, redelivered.
	chb2 := openChannel(t, b)
	ds2, err := chb2.Consume("qb", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	again := drain(t, ds2, n/2)
	for _, d := range again {
		if acked[string(d.Body)] || !seen[string(d.Body)] || !d.Redelivered {
			t.Fatalf("%s again: acked before %v, delivered before %v, redelivered %v", d.Body, acked[string(d.Body)], seen[string(d.Body)], d.Redelivered)
		}
		acked[string(d.Body)] = true
		d.Ack(false)
	}
	if len(acked) != n {
		t.Fatalf("%d distinct messages settled, want %d", len(acked), n)
	}
	chb2.Close()
	waitFor(t, "qb empty on broker-b", 10*time.Second, func() bool {
		q, err := chb.QueueDeclarePassive("qb", true, false, false, false, nil)
		return err == nil && q.Messages == 0 && q.Consumers == 0
	})

	// The other way round: through broker-b into broker-a's queue; basic.get
	// through broker-b (forwarded) and broker-a (local).
	if acked, nacked := publishConfirmed(t, openChannel(t, b), "qa", "r", 2, false); acked != 2 || nacked != 0 {
		t.Fatalf("to qa through broker-b: %d acks, %d nacks", acked, nacked)
	}
	m, ok, err := chb.Get("qa", false)
	if err != nil || !ok || string(m.Body) != "r-0" {
		t.Fatalf("get qa through broker-b: %q %v %v", m.Body, ok, err)
	}
	if err := m.Ack(false); err != nil {
		t.Fatal(err)
	}
	m, ok, err = cha.Get("qa", true)
	if err != nil || !ok || string(m.Body) != "r-1" {
		t.Fatalf("get qa through broker-a: %q %v %v", m.Body, ok, err)
	}
	waitFor(t, "qa empty", 10*time.Second, func() bool {
		q, err := cha.QueueDeclarePassive("qa", true, false, false, false, nil)
		return err == nil && q.Messages == 0
	})

	// An exchange of broker-a bound to qa (here) and qb (broker-b's):
	// each confirmed publish through it is in both, once.
	ech := openChannel(t, a)
	if err := ech.ExchangeDeclare("fan", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"qa", "qb"} {
		if err := ech.QueueBind(q, "", "fan", false, nil); err != nil {
			t.Fatalf("bind %s through broker-a: %v", q, err)
		}
	}
	if err := ech.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const fanN = 50
	fconfirms := ech.NotifyPublish(make(chan amqp091.Confirmation, fanN))
	for i := range fanN {
		if err := ech.Publish("fan", "", true, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte("f-" + strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range fanN {
		select {
		case c := <-fconfirms:
			if !c.Ack {
				t.Fatalf("fanout publish %d nacked", c.DeliveryTag)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d fanout confirms", i, fanN)
		}
	}
	for i, via := range []*amqp091.Connection{a, b} {
		q := []string{"qa", "qb"}[i]
		fc := openChannel(t, via)
		fds, err := fc.Consume(q, "", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		bodies := map[string]bool{}
		for _, d := range drain(t, fds, fanN) {
			if bodies[string(d.Body)] {
				t.Fatalf("%s twice in %s", d.Body, q)
			}
			bodies[string(d.Body)] = true
		}
		fc.Close()
	}
	for i, ch := range []*amqp091.Channel{cha, chb} {
		q := []string{"qa", "qb"}[i]
		if st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil); err != nil || st.Messages != 0 {
			t.Fatalf("%s after the fanout: %d messages left (%v)", q, st.Messages, err)
		}
	}

	// A mandatory publish to a queue that no group has is returned.
	rch := openChannel(t, a)
	returns := rch.NotifyReturn(make(chan amqp091.Return, 1))
	if acked, _ := publishConfirmed(t, rch, "nowhere", "x", 1, true); acked != 1 {
		t.Fatal("unroutable publish not acked")
	}
	select {
	case r := <-returns:
		if r.ReplyCode != amqp091.NoRoute {
			t.Fatalf("return %d", r.ReplyCode)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no basic.return for an unroutable mandatory publish")
	}

	// A transaction through broker-a over qa (here) and qb (broker-b's):
	// a publish to each and the ack of a qb delivery, committed together.
	if acked, _ := publishConfirmed(t, openChannel(t, b), "qb", "tx-old", 1, false); acked != 1 {
		t.Fatal("publish to qb not acked")
	}
	txc := openChannel(t, a)
	if err := txc.Tx(); err != nil {
		t.Fatal(err)
	}
	old, ok, err := txc.Get("qb", false)
	if err != nil || !ok || string(old.Body) != "tx-old-0" {
		t.Fatalf("get qb in a transaction: %q %v %v", old.Body, ok, err)
	}
	txPub := func(q, body string) {
		t.Helper()
		if err := txc.Publish("", q, false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(body)}); err != nil {
			t.Fatal(err)
		}
	}
	txPub("qa", "tx-a")
	txPub("qb", "tx-b")
	if err := old.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := txc.TxCommit(); err != nil {
		t.Fatalf("commit over both groups: %v", err)
	}
	for i, via := range []*amqp091.Channel{cha, chb} {
		q, want := []string{"qa", "qb"}[i], []string{"tx-a", "tx-b"}[i]
		m, ok, err := via.Get(q, true)
		if err != nil || !ok || string(m.Body) != want {
			t.Fatalf("%s after the commit: %q %v %v", q, m.Body, ok, err)
		}
		if st, err := via.QueueDeclarePassive(q, true, false, false, false, nil); err != nil || st.Messages != 0 {
			t.Fatalf("%s after the commit: %d more (%v)", q, st.Messages, err)
		}
	}
	// Another transaction held when broker-b dies: its commit fails.
	txPub("qa", "never")
	txPub("qb", "never")
	if _, err := txc.QueueDeclarePassive("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err) // a round trip: the publishes were taken
	}

	// New names declared at the same moment through both members: one
	// queue each (a publish through each member lands in the same queue).
	var decl []*amqp091.Channel
	for _, addr := range []string{g.amqp[0], g.amqp[0], g.amqp[1], g.amqp[1]} {
		decl = append(decl, openChannel(t, dialAMQP(t, addr)))
	}
	for i := range 20 {
		name := "race-" + strconv.Itoa(i)
		var wg sync.WaitGroup
		errs := make([]error, len(decl))
		for j, ch := range decl {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[j] = ch.QueueDeclare(name, true, false, false, false, nil)
			}()
		}
		wg.Wait()
		for j, err := range errs {
			if err != nil {
				t.Fatalf("declare %s (connection %d): %v", name, j, err)
			}
		}
		for _, via := range []*amqp091.Connection{a, b} {
			if acked, _ := publishConfirmed(t, openChannel(t, via), name, "r", 1, false); acked != 1 {
				t.Fatalf("publish to %s not acked", name)
			}
		}
		for k, ch := range []*amqp091.Channel{cha, chb} {
			if st, err := ch.QueueDeclarePassive(name, true, false, false, false, nil); err != nil || st.Messages != 2 {
				t.Fatalf("%s through broker-%c: %d messages (%v), want the 2 published through both", name, 'a'+k, st.Messages, err)
			}
		}
	}

	// A message rejected on broker-a's queue, dead-lettered to broker-b's.
	if _, err := cha.QueueDeclare("qdl", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "qb"}); err != nil {
		t.Fatal(err)
	}
	if acked, _ := publishConfirmed(t, openChannel(t, a), "qdl", "dl", 1, false); acked != 1 {
		t.Fatal("publish to qdl not acked")
	}
	dm, ok, err := cha.Get("qdl", false)
	if err != nil || !ok {
		t.Fatalf("get qdl: %v %v", ok, err)
	}
	if err := dm.Reject(false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead-letter copy on broker-b", 10*time.Second, func() bool {
		st, err := chb.QueueDeclarePassive("qb", true, false, false, false, nil)
		return err == nil && st.Messages == 1
	})
	if m, ok, err := chb.Get("qb", true); err != nil || !ok || string(m.Body) != "dl-0" || m.Headers["x-death"] == nil {
		t.Fatalf("dead-letter copy on broker-b: %q %v %v %v", m.Body, m.Headers, ok, err)
	}

	// broker-b dies: its queue fails clearly through broker-a.
	g.kill[1]()
	waitFor(t, "broker-b's door gone", 30*time.Second, func() bool {
		_, err := amqp091.Dial("amqp://guest:guest@" + g.amqp[1] + "/")
		return err != nil
	})
	pch := openChannel(t, a)
	if acked, nacked := publishConfirmed(t, pch, "qb", "late", 3, false); acked != 0 || nacked != 3 {
		t.Fatalf("with broker-b down: %d acks, %d nacks, want 3 nacks", acked, nacked)
	}
	_, err = openChannel(t, a).Consume("qb", "", false, false, false, false, nil)
	if !errors.As(err, &ae) || ae.Code != amqp091.NotFound || !strings.Contains(ae.Reason, "broker-b") || !strings.Contains(ae.Reason, "down or inaccessible") {
		t.Fatalf("consume with broker-b down: %v", err)
	}
	// The transaction held over the kill: a channel error, never
	// commit-ok, and its part here not applied.
	err = txc.TxCommit()
	if !errors.As(err, &ae) || ae.Code != amqp091.NotFound || !strings.Contains(ae.Reason, "transaction not committed") || !strings.Contains(ae.Reason, "broker-b") {
		t.Fatalf("commit with broker-b killed: %v", err)
	}
	if st, err := openChannel(t, a).QueueDeclarePassive("qa", true, false, false, false, nil); err != nil || st.Messages != 0 {
		t.Fatalf("qa after the failed commit: %d messages (%v)", st.Messages, err)
	}
}

// TestAMQPPikaAcrossGroups: the pika examples across two groups: the
// durable publisher run against broker-b (the queue's home) and then
// against broker-a (its declare and confirmed publish forwarded to
// broker-b), the consumer run against broker-a: both messages, once
// each, acknowledged on broker-b.
func TestAMQPPikaAcrossGroups(t *testing.T) {
	needPika(t)
	g := startAMQPGroups(t)
	for _, addr := range []string{g.amqp[1], g.amqp[0]} {
		if out := runPika(t, addr, "durable_publish.py"); !strings.Contains(out, "Sent") {
			t.Fatalf("publisher through %s said %q", addr, out)
		}
	}
	out := runPika(t, g.amqp[0], "consume_ack.py")
	if n := strings.Count(out, "Hello, durable queue! delivery_mode=2 redelivered=False"); n != 2 || strings.Count(out, "\n") != 2 {
		t.Fatalf("consumer through broker-a:\n%s", out)
	}
	ch := openChannel(t, dialAMQP(t, g.amqp[1]))
	waitFor(t, "the queue empty on broker-b", 10*time.Second, func() bool {
		q, err := ch.QueueDeclarePassive("my_durable_queue", true, false, false, false, nil)
		return err == nil && q.Messages == 0
	})
}
