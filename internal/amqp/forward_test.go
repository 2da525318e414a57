package amqp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/acl"
)

// staticCluster is a Cluster whose peers the test sets.
type staticCluster struct {
	mu    sync.Mutex
	peers []Peer
	err   error // what Peers answers instead, if set
}

func (s *staticCluster) Peers(context.Context) ([]Peer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return nil, s.err
	}
	return append([]Peer(nil), s.peers...), nil
}

// set sets the peers (under the lock: a client that is not a goroutine
// of the test's, such as pika, gives the race detector no order).
func (s *staticCluster) set(ps []Peer) {
	s.mu.Lock()
	s.peers = ps
	s.mu.Unlock()
}

// startPair starts two brokers, groups "a" and "b", each knowing the
// other as its peer.
func startPair(t *testing.T) (a, b *broker) {
	ca, cb := &staticCluster{}, &staticCluster{}
	a = &broker{t: t, dir: t.TempDir(), cluster: ca, group: "a"}
	a.start()
	t.Cleanup(a.stop)
	b = &broker{t: t, dir: t.TempDir(), cluster: cb, group: "b"}
	b.start()
	t.Cleanup(b.stop)
	ca.set([]Peer{{Group: "b", Addr: b.addr}})
	cb.set([]Peer{{Group: "a", Addr: a.addr}})
	return a, b
}

// declared reports whether b's own vhost "/" has queue name.
func declared(b *broker, name string) bool { return b.srv.vhosts["/"].queue(name) != nil }

// queueCount is the message count b's door answers for queue name.
func queueCount(t *testing.T, b *broker, name string) int {
	t.Helper()
	q, err := b.channel().QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// TestForwardDeclareHome: a queue declared through b lives on b; through
// a, a redeclare is answered by b (406 on other arguments, passive finds
// it with b's count); a name no group has is declared on the member the
// client is connected to.
func TestForwardDeclareHome(t *testing.T) {
	a, b := startPair(t)
	args := amqp091.Table{"x-max-length": int32(10)}
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, b.channel(), "qb", "one")
	cha := a.channel()
	q, err := cha.QueueDeclare("qb", true, false, false, false, args)
	if err != nil || q.Messages != 1 {
		t.Fatalf("redeclare through a: %+v %v", q, err)
	}
	if q, err := cha.QueueDeclarePassive("qb", true, false, false, false, nil); err != nil || q.Messages != 1 {
		t.Fatalf("passive through a: %+v %v", q, err)
	}
	err = exception(t, cha, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("qb", true, false, false, false, amqp091.Table{"x-max-length": int32(11)})
		return err
	})
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.PreconditionFailed || !strings.Contains(ae.Reason, "x-max-length") {
		t.Fatalf("other arguments through a: %v", err)
	}
	if declared(a, "qb") {
		t.Fatal("a stores qb")
	}
	if _, err := a.channel().QueueDeclare("qnew", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if !declared(a, "qnew") || declared(b, "qnew") {
		t.Fatalf("qnew on a %v, on b %v", declared(a, "qnew"), declared(b, "qnew"))
	}
	// Purge and delete through a reach b.
	if n, err := a.channel().QueuePurge("qb", false); err != nil || n != 1 {
		t.Fatalf("purge through a: %d %v", n, err)
	}
	if _, err := a.channel().QueueDelete("qb", false, false, false); err != nil {
		t.Fatal(err)
	}
	if declared(b, "qb") {
		t.Fatal("qb still on b after a delete through a")
	}
}

// TestForwardConsumeSettle: messages published through a to b's queue,
// consumed through a: ack (multiple), reject and nack with requeue are
// carried out on b; what is unacknowledged when the channel closes is
// back on b, redelivered.
func TestForwardConsumeSettle(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for i := range 10 {
		bodies = append(bodies, fmt.Sprint("m", i))
	}
	publishConfirmed(t, a.channel(), "qb", bodies...)
	if n := queueCount(t, b, "qb"); n != 10 {
		t.Fatalf("b has %d messages", n)
	}
	ch := a.channel()
	ds, err := ch.Consume("qb", "c1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []amqp091.Delivery
	for range 10 {
		got = append(got, recv(t, ds))
	}
	for i, d := range got {
		if string(d.Body) != bodies[i] || d.Redelivered || d.ConsumerTag != "c1" {
			t.Fatalf("delivery %d: %q redelivered %v tag %q", i, d.Body, d.Redelivered, d.ConsumerTag)
		}
	}
	if err := got[2].Ack(true); err != nil { // m0..m2
		t.Fatal(err)
	}
	if err := got[3].Reject(false); err != nil { // m3 dropped
		t.Fatal(err)
	}
	if err := got[4].Nack(false, true); err != nil { // m4 back, to this consumer again
		t.Fatal(err)
	}
	d := recv(t, ds)
	if string(d.Body) != "m4" || !d.Redelivered {
		t.Fatalf("after nack: %q redelivered %v", d.Body, d.Redelivered)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	ch.Close() // m5..m9 unacknowledged
	waitUntil(t, "m5..m9 back on b", func() bool { return queueCount(t, b, "qb") == 5 })
	m, ok, err := a.channel().Get("qb", true)
	if err != nil || !ok || string(m.Body) != "m5" || !m.Redelivered || m.MessageCount != 4 {
		t.Fatalf("get through a: %q ok %v redelivered %v count %d %v", m.Body, ok, m.Redelivered, m.MessageCount, err)
	}
}

// TestForwardMandatoryReturn: a queue gone from its home after a learnt
// where it was: a mandatory publish through a comes back with
// basic.return before its ack, as for a local unroutable one.
func TestForwardMandatoryReturn(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch := a.channel()
	publishConfirmed(t, ch, "qb", "known") // a learns qb's home
	if _, err := b.channel().QueueDelete("qb", false, false, false); err != nil {
		t.Fatal(err)
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	dc, err := ch.PublishWithDeferredConfirm("", "qb", true, false, amqp091.Publishing{Body: []byte("lost")})
	if err != nil {
		t.Fatal(err)
	}
	if !dc.Wait() {
		t.Fatal("nacked")
	}
	select {
	case r := <-returns:
		if r.ReplyCode != amqp091.NoRoute || string(r.Body) != "lost" || r.RoutingKey != "qb" {
			t.Fatalf("return %+v", r)
		}
	default:
		t.Fatal("no basic.return before the ack")
	}
}

// TestForwardExchangeBoth: an exchange of a bound to a queue of its own
// and one of b's: a confirmed publish is in both; the binding to b's queue
// is durable (a restarted a still routes there).
func TestForwardExchangeBoth(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	ch := a.channel()
	if _, err := ch.QueueDeclare("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("x", "direct", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"qa", "qb"} {
		if err := ch.QueueBind(q, "k", "x", false, nil); err != nil {
			t.Fatal(err)
		}
	}
	publishX := func(body string) {
		t.Helper()
		ch := a.channel()
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
		dc, err := ch.PublishWithDeferredConfirm("x", "k", true, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(body)})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish %s: %v", body, err)
		}
		select {
		case r := <-returns:
			t.Fatalf("returned %+v", r)
		default:
		}
	}
	publishX("both")
	if queueCount(t, a, "qa") != 1 || queueCount(t, b, "qb") != 1 {
		t.Fatalf("qa %d, qb %d", queueCount(t, a, "qa"), queueCount(t, b, "qb"))
	}
	a.restart()
	publishX("again")
	if queueCount(t, a, "qa") != 2 || queueCount(t, b, "qb") != 2 {
		t.Fatalf("after a restart: qa %d, qb %d", queueCount(t, a, "qa"), queueCount(t, b, "qb"))
	}
	if err := a.channel().QueueUnbind("qb", "k", "x", nil); err != nil {
		t.Fatal(err)
	}
	publishX("only-a")
	if queueCount(t, a, "qa") != 3 || queueCount(t, b, "qb") != 2 {
		t.Fatalf("after unbind: qa %d, qb %d", queueCount(t, a, "qa"), queueCount(t, b, "qb"))
	}
}

// TestForwardHomeDown: with b gone, a publish through a to b's queue is
// nacked, a consume fails naming b, and a consumer of it through a has
// its channel closed.
func TestForwardHomeDown(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cons := a.channel()
	closed := cons.NotifyClose(make(chan *amqp091.Error, 1))
	if _, err := cons.Consume("qb", "", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	b.crash()
	select {
	case e := <-closed:
		if e == nil || e.Code != amqp091.NotFound || !strings.Contains(e.Reason, "broker group b") {
			t.Fatalf("consumer's channel closed with %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer's channel stayed open")
	}
	ch := a.channel()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", "qb", false, false, amqp091.Publishing{Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if dc.Wait() {
		t.Fatal("a publish to the queue of a group that is down was acked")
	}
	err = exception(t, a.channel(), func(ch *amqp091.Channel) error {
		_, err := ch.Consume("qb", "", false, false, false, false, nil)
		return err
	})
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.NotFound || !strings.Contains(ae.Reason, "down or inaccessible") {
		t.Fatalf("consume with b down: %v", err)
	}
}

// TestForwardGroupGone: once a group's master is no longer registered,
// a publish to a queue a knew there is nacked, and a name no group that
// answers has cannot be declared (the missing group may hold it: two
// homes) until the group is back.
func TestForwardGroupGone(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, a.channel(), "qb", "known")
	setPeers := func(ps []Peer) {
		cl := a.cluster.(*staticCluster)
		cl.mu.Lock()
		cl.peers = ps
		cl.mu.Unlock()
		h := &a.srv.homes
		h.mu.Lock()
		h.peersAt = time.Time{} // asked again at the next look-up
		h.mu.Unlock()
	}
	bPeer := Peer{Group: "b", Addr: b.addr}
	setPeers(nil)
	ch := a.channel()
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", "qb", false, false, amqp091.Publishing{Body: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if dc.Wait() {
		t.Fatal("a publish to the queue of a group without a master was acked")
	}
	err = exception(t, a.channel(), func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("fresh", true, false, false, false, nil)
		return err
	})
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.NotFound || !strings.Contains(ae.Reason, "b (no master registered)") {
		t.Fatalf("declare with b unregistered: %v", err)
	}
	if declared(a, "fresh") {
		t.Fatal("declared while a group that may hold it was missing")
	}
	// In a transaction such a publish closes the channel (a commit would
	// otherwise leave it out).
	err = exception(t, a.channel(), func(ch *amqp091.Channel) error {
		if err := ch.Tx(); err != nil {
			return err
		}
		if err := ch.Publish("", "fresh", false, false, amqp091.Publishing{Body: []byte("tx")}); err != nil {
			return err
		}
		return ch.TxCommit()
	})
	if !errors.As(err, &ae) || ae.Code != amqp091.NotFound || !strings.Contains(ae.Reason, "no master registered") {
		t.Fatalf("transactional publish with b unregistered: %v", err)
	}
	setPeers([]Peer{bPeer})
	if _, err := a.channel().QueueDeclare("fresh", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if !declared(a, "fresh") {
		t.Fatal("fresh not declared on a once b answered")
	}
	publishConfirmed(t, a.channel(), "qb", "back")
}

// freezer is a TCP relay to addr whose answers (addr to client) stop
// while frozen: a home alive on TCP that answers nothing.
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
}

func startFreezer(t *testing.T, addr string) *freezer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(up, c); up.Close() }()
			go func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := up.Read(buf)
					for f.frozen.Load() {
						time.Sleep(10 * time.Millisecond)
					}
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						break
					}
				}
				c.Close()
			}()
		}
	}()
	return f
}

// TestForwardStuckHome: a home that stops answering (alive on TCP) has
// the publishes waiting for its confirm nacked after confirmTimeout.
func TestForwardStuckHome(t *testing.T) {
	old := confirmTimeout
	confirmTimeout = 300 * time.Millisecond
	t.Cleanup(func() { confirmTimeout = old })
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	f := startFreezer(t, b.addr)
	cl := a.cluster.(*staticCluster)
	cl.mu.Lock()
	cl.peers = []Peer{{Group: "b", Addr: f.ln.Addr().String()}}
	cl.mu.Unlock()
	ch := a.channel()
	publishConfirmed(t, ch, "qb", "through the relay")
	f.frozen.Store(true)
	dc, err := ch.PublishWithDeferredConfirm("", "qb", false, false, amqp091.Publishing{Body: []byte("stuck")})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan bool, 1)
	go func() { done <- dc.Wait() }()
	select {
	case acked := <-done:
		if acked {
			t.Fatal("acked while the home answered nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no confirm 10 s after the home stopped answering")
	}
	f.frozen.Store(false)
}

// TestForwardConsumerTagShared: a channel's consumer tags are one set
// over its local and forwarded consumers (530, as for a reused tag).
func TestForwardConsumerTagShared(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.channel().QueueDeclare("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	for _, order := range [][2]string{{"qb", "qa"}, {"qa", "qb"}} {
		conn := a.dial()
		closed := conn.NotifyClose(make(chan *amqp091.Error, 1))
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.Consume(order[0], "t", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		ch.Consume(order[1], "t", false, false, false, false, nil)
		select {
		case e := <-closed:
			if e == nil || e.Code != amqp091.NotAllowed {
				t.Fatalf("%s then %s: closed with %v", order[0], order[1], e)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s then %s: the tag was taken twice", order[0], order[1])
		}
	}
}

// TestForwardAckMultipleMixed: one ack with multiple=true on a channel
// consuming a local and a forwarded queue settles the deliveries of both.
func TestForwardAckMultipleMixed(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := a.channel().QueueDeclare("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, a.channel(), "qa", "a1", "a2")
	publishConfirmed(t, a.channel(), "qb", "b1", "b2")
	ch := a.channel()
	var last amqp091.Delivery
	for _, q := range []string{"qa", "qb"} {
		ds, err := ch.Consume(q, "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if d := recv(t, ds); d.DeliveryTag > last.DeliveryTag {
				last = d
			}
		}
	}
	if err := last.Ack(true); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclarePassive("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err) // a round trip: the ack was taken
	}
	ch.Close()
	waitUntil(t, "both queues settled", func() bool { return queueCount(t, a, "qa") == 0 && queueCount(t, b, "qb") == 0 })
}

// TestForwardPeersUnanswered: when the cluster's doors cannot be asked
// (the NameServers are down), the last list stands: a queue of b is
// still used through a.
func TestForwardPeersUnanswered(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, a.channel(), "qb", "before")
	cl := a.cluster.(*staticCluster)
	cl.mu.Lock()
	cl.err = errors.New("no NameServer answered")
	cl.mu.Unlock()
	h := &a.srv.homes
	h.mu.Lock()
	h.peersAt = time.Time{}
	h.byName = nil // asked of b again, too
	h.mu.Unlock()
	publishConfirmed(t, a.channel(), "qb", "after")
	if n := queueCount(t, b, "qb"); n != 2 {
		t.Fatalf("qb has %d messages", n)
	}
}

// TestForwardAcksBeforeClose: acknowledgements a client sends just before
// it closes its connection reach the home, though the home is still
// sending deliveries then (closing the upstream socket with them unread
// would reset it and could lose the acks): exactly the unacknowledged
// messages stay.
func TestForwardAcksBeforeClose(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const n, acked = 600, 200
	body := strings.Repeat("x", 16<<10)
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = body
	}
	publishConfirmed(t, b.channel(), "qb", bodies...)
	for round := range 3 {
		conn := a.dial()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if err := ch.Qos(100, 0, false); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume("qb", "", false, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		for range acked / 3 {
			if err := recv(t, ds).Ack(false); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close()
		want := n - (round+1)*(acked/3)
		waitUntil(t, "the unacknowledged messages back on b", func() bool {
			q, err := b.channel().QueueDeclarePassive("qb", true, false, false, false, nil)
			return err == nil && q.Consumers == 0 && q.Messages <= want
		})
		if got := queueCount(t, b, "qb"); got != want {
			t.Fatalf("round %d: %d messages on b, want %d", round, got, want)
		}
	}
}

// TestForwardCancelInFlight: what the home delivered before its
// cancel-ok reaches the client: after a cancel, every message of the
// queue is either delivered to the client or ready on the home, none
// left unacknowledged where the client cannot see it.
func TestForwardCancelInFlight(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprint("m", i)
	}
	publishConfirmed(t, b.channel(), "qb", bodies...)
	ch := a.channel()
	ds, err := ch.Consume("qb", "c", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, ds)
	if err := ch.Cancel("c", false); err != nil {
		t.Fatal(err)
	}
	got := 1
	for range ds { // closed after cancel-ok
		got++
	}
	if ready := queueCount(t, b, "qb"); ready+got != n {
		t.Fatalf("%d delivered, %d ready on b: %d unaccounted for", got, ready, n-got-ready)
	}
}

// TestForwardStream: a stream queue of b read through a from its first
// offset, twice (a stream is read, not consumed).
func TestForwardStream(t *testing.T) {
	a, b := startPair(t)
	args := amqp091.Table{"x-queue-type": "stream"}
	if _, err := b.channel().QueueDeclare("sb", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, a.channel(), "sb", "s0", "s1", "s2")
	for range 2 {
		ch := a.channel()
		if err := ch.Qos(10, 0, false); err != nil {
			t.Fatal(err)
		}
		ds, err := ch.Consume("sb", "", false, false, false, false, amqp091.Table{"x-stream-offset": "first"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			d := recv(t, ds)
			if string(d.Body) != fmt.Sprint("s", i) {
				t.Fatalf("delivery %d: %q", i, d.Body)
			}
			d.Ack(false)
		}
		ch.Close()
	}
}

// TestForwardUpdateSecret: after connection.update-secret through a, a
// new connection to b logs in with the new secret, and an open one has b
// apply the account as it is now.
func TestForwardUpdateSecret(t *testing.T) {
	parse := func(text string) *acl.Rules {
		r, err := acl.Parse("plain_acl.yml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const before = "accounts:\n  - accessKey: worker01\n    secretKey: secret-1\n    defaultTopicPerm: DENY\n    topicPerms:\n      - feed=SUB\n" +
		"  - accessKey: admin01\n    secretKey: admin-secret\n    admin: true\n"
	var rules atomic.Pointer[acl.Rules]
	rules.Store(parse(before))
	accounts := func() *acl.Rules { return rules.Load() }
	ca, cb := &staticCluster{}, &staticCluster{}
	a := &broker{t: t, dir: t.TempDir(), cluster: ca, group: "a", accounts: accounts}
	a.start()
	t.Cleanup(a.stop)
	b := &broker{t: t, dir: t.TempDir(), cluster: cb, group: "b", accounts: accounts}
	b.start()
	t.Cleanup(b.stop)
	ca.peers, cb.peers = []Peer{{Group: "b", Addr: b.addr}}, []Peer{{Group: "a", Addr: a.addr}}
	admin, err := amqp091.Dial("amqp://admin01:admin-secret@" + b.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ach, err := admin.Channel()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"feed", "jobs"} {
		if _, err := ach.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i, rotate := range []bool{false, true} {
		rules.Store(parse(before))
		c, err := amqp091.Dial("amqp://worker01:secret-1@" + a.addr + "/")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if rotate { // the connection to b is open before the rotation
			if _, err := ch.Consume("feed", "", false, false, false, false, nil); err != nil {
				t.Fatal(err)
			}
		}
		rules.Store(parse(strings.Replace(strings.Replace(before, "secret-1", "secret-2", 1), "feed=SUB", "jobs=SUB", 1)))
		if err := c.UpdateSecret("secret-2", "rotated"); err != nil {
			t.Fatal(err)
		}
		if _, err := ch.Consume("jobs", "", false, false, false, false, nil); err != nil {
			t.Fatalf("case %d: consume jobs through a after the rotation: %v", i, err)
		}
	}
}
