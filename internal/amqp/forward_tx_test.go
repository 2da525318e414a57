package amqp

import (
	"errors"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// startGroups starts n brokers, groups "a", "b", "c", ..., each knowing
// the others as its peers.
func startGroups(t *testing.T, n int) []*broker {
	var bs []*broker
	var cls []*staticCluster
	for i := range n {
		cl := &staticCluster{}
		b := &broker{t: t, dir: t.TempDir(), cluster: cl, group: string(rune('a' + i))}
		b.start()
		t.Cleanup(b.stop)
		bs, cls = append(bs, b), append(cls, cl)
	}
	for i, cl := range cls {
		var ps []Peer
		for j, b := range bs {
			if j != i {
				ps = append(ps, Peer{Group: string(rune('a' + j)), Addr: b.addr})
			}
		}
		cl.set(ps)
	}
	return bs
}

// drain gets every ready message of queue through ch (basic.get, acked)
// and returns their bodies.
func drain(t *testing.T, ch *amqp091.Channel, queue string) []string {
	t.Helper()
	var got []string
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got
		}
		got = append(got, string(d.Body))
	}
}

// TestForwardTxCommit: one transaction through a publishes to a's queue
// and to b's, and acknowledges a delivery of b's queue; nothing of it is
// applied before tx.commit, all of it after commit-ok.
func TestForwardTxCommit(t *testing.T) {
	a, b := startPair(t)
	for _, d := range []struct {
		b    *broker
		name string
	}{{a, "qa"}, {b, "qb"}} {
		if _, err := d.b.channel().QueueDeclare(d.name, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	publishConfirmed(t, b.channel(), "qb", "old")
	ch := a.channel()
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	ds, err := ch.Consume("qb", "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	old := recv(t, ds)
	if string(old.Body) != "old" {
		t.Fatalf("got %q", old.Body)
	}
	pubTx(t, ch, "qa", "to-a")
	pubTx(t, ch, "qb", "to-b")
	if err := old.Ack(false); err != nil {
		t.Fatal(err)
	}
	if n := queueCount(t, a, "qa"); n != 0 {
		t.Fatalf("qa holds %d messages before the commit", n)
	}
	if n := queueCount(t, b, "qb"); n != 0 {
		t.Fatalf("qb holds %d ready messages before the commit", n)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	// The consumer gets what the commit published to qb.
	if d := recv(t, ds); string(d.Body) != "to-b" || d.Redelivered {
		t.Fatalf("after the commit: %q redelivered %v", d.Body, d.Redelivered)
	}
	if err := ch.Close(); err != nil { // "to-b" unacknowledged: back in qb
		t.Fatal(err)
	}
	if got := drain(t, a.channel(), "qa"); len(got) != 1 || got[0] != "to-a" {
		t.Fatalf("qa: %q", got)
	}
	// "old" was acked by the commit: only "to-b" is left on b.
	if got := drain(t, b.channel(), "qb"); len(got) != 1 || got[0] != "to-b" {
		t.Fatalf("qb: %q", got)
	}
}

// TestForwardTxRollback: tx.rollback discards the publishes to both
// groups' queues; the remote delivery whose ack it discarded is
// unacknowledged again, and a later commit of a new ack settles it.
func TestForwardTxRollback(t *testing.T) {
	a, b := startPair(t)
	if _, err := a.channel().QueueDeclare("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, b.channel(), "qb", "old")
	ch := a.channel()
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get("qb", false)
	if err != nil || !ok || string(d.Body) != "old" {
		t.Fatalf("get: %q %v %v", d.Body, ok, err)
	}
	pubTx(t, ch, "qa", "x")
	pubTx(t, ch, "qb", "y")
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if err := ch.TxRollback(); err != nil {
		t.Fatal(err)
	}
	if n := queueCount(t, a, "qa"); n != 0 {
		t.Fatalf("qa holds %d after the rollback", n)
	}
	if n := queueCount(t, b, "qb"); n != 0 { // "old" still unacknowledged
		t.Fatalf("qb holds %d ready after the rollback", n)
	}
	if err := d.Ack(false); err != nil { // the tag is the client's again
		t.Fatal(err)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, b.channel(), "qb"); len(got) != 0 {
		t.Fatalf("qb after the committed ack: %q", got)
	}
}

// TestForwardTxHomeDown: the home of a queue the transaction touches is
// killed before tx.commit: the client gets a channel error, never
// commit-ok, and nothing of the transaction is applied (the local part
// comes last); the delivery whose ack was held is back in its queue.
func TestForwardTxHomeDown(t *testing.T) {
	a, b := startPair(t)
	if _, err := a.channel().QueueDeclare("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, b.channel(), "qb", "old")
	ch := a.channel()
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get("qb", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	pubTx(t, ch, "qa", "x")
	pubTx(t, ch, "qb", "y")
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err) // a round trip: the publishes and the ack were taken
	}
	b.crash()
	err = exception(t, ch, func(ch *amqp091.Channel) error { return ch.TxCommit() })
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.NotFound || !strings.Contains(ae.Reason, "transaction not committed") ||
		!strings.Contains(ae.Reason, "broker group b") || !strings.Contains(ae.Reason, "no part was committed") {
		t.Fatalf("commit with b down: %v", err)
	}
	if n := queueCount(t, a, "qa"); n != 0 {
		t.Fatalf("qa holds %d after a failed commit", n)
	}
	b.start()
	if got := drain(t, b.channel(), "qb"); len(got) != 1 || got[0] != "old" {
		t.Fatalf("qb after the failed commit: %q", got)
	}
}

// TestForwardTxPartFailed: a transaction over three groups whose last
// part its home refuses (c's queue is over a Keel topic, which a
// transaction does not serve): the earlier part, b's, stays committed
// (each group's part is atomic, the whole is not), the client gets a
// channel error that says so, with the home's code, never commit-ok,
// and the local part is not applied.
func TestForwardTxPartFailed(t *testing.T) {
	bs := startGroups(t, 3)
	a, b, c := bs[0], bs[1], bs[2]
	if _, err := a.channel().QueueDeclare("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.channel().QueueDeclare("qc", true, false, false, false, amqp091.Table{ArgKeelTopic: "feed"}); err != nil {
		t.Fatal(err)
	}
	ch := a.channel()
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	pubTx(t, ch, "qa", "x")
	pubTx(t, ch, "qc", "z")
	pubTx(t, ch, "qb", "y")
	err := exception(t, ch, func(ch *amqp091.Channel) error { return ch.TxCommit() })
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed || !strings.Contains(ae.Reason, "broker group c refused it") ||
		!strings.Contains(ae.Reason, "the parts of broker group b stay committed") {
		t.Fatalf("commit refused by c: %v", err)
	}
	if got := drain(t, b.channel(), "qb"); len(got) != 1 || got[0] != "y" {
		t.Fatalf("qb: %q", got)
	}
	if n := queueCount(t, a, "qa"); n != 0 {
		t.Fatalf("qa holds %d after a failed commit", n)
	}
	if n := queueCount(t, c, "qc"); n != 0 {
		t.Fatalf("qc holds %d after a failed commit", n)
	}
}

// TestForwardTxMandatoryReturn: a mandatory message of a transaction
// whose queue on another group is gone by the commit is returned to the
// client before commit-ok.
func TestForwardTxMandatoryReturn(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch := a.channel()
	rets := ch.NotifyReturn(make(chan amqp091.Return, 1))
	if err := ch.Tx(); err != nil {
		t.Fatal(err)
	}
	if err := ch.Publish("", "qb", true, false, amqp091.Publishing{Body: []byte("lost")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err) // a round trip: the publish was taken while qb was on b
	}
	if _, err := b.channel().QueueDelete("qb", false, false, false); err != nil {
		t.Fatal(err)
	}
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-rets:
		if string(r.Body) != "lost" || r.RoutingKey != "qb" || r.ReplyCode != amqp091.NoRoute {
			t.Fatalf("returned %+v", r)
		}
	default:
		t.Fatal("no basic.return before commit-ok")
	}
}

// TestForwardTxSelectAfterPublish: a channel that published to b's queue
// outside a transaction may select tx (its confirm-mode channel to b is
// replaced) and commit over b; one that also consumes from b is refused
// with 406.
func TestForwardTxSelectAfterPublish(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch := a.channel()
	pubTx(t, ch, "qb", "before")
	if _, err := ch.QueueDeclarePassive("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Tx(); err != nil {
		t.Fatalf("tx.select after a publish to b: %v", err)
	}
	pubTx(t, ch, "qb", "in-tx")
	if err := ch.TxCommit(); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, b.channel(), "qb"); len(got) != 2 || got[0] != "before" || got[1] != "in-tx" {
		t.Fatalf("qb: %q", got)
	}

	busy := a.channel()
	pubTx(t, busy, "qb", "x")
	if _, err := busy.Consume("qb", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	err := exception(t, busy, func(ch *amqp091.Channel) error { return ch.Tx() })
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed || !strings.Contains(ae.Reason, "broker group b") {
		t.Fatalf("tx.select on a channel publishing to and consuming from b: %v", err)
	}
}
