package amqp

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/acl"
)

// TestManagementSnapshots: the snapshots show the open connections, their
// channels and consumers with their counts, and the bindings with their
// arguments; a connection gone is gone from them.
func TestManagementSnapshots(t *testing.T) {
	b := startBroker(t)
	c := b.dial()
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("snap", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("hx", "headers", false, false, false, false, amqp091.Table{"alternate-exchange": "amq.fanout"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("snap", "", "hx", false, amqp091.Table{"x-match": "all", "kind": "a", "n": int32(7)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeBind("amq.direct", "k", "hx", false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "snap", "1", "2", "3")
	if err := ch.Qos(2, 0, false); err != nil {
		t.Fatal(err)
	}
	d, err := ch.Consume("snap", "tag-1", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, d)
	recv(t, d)

	conns := b.srv.ConnectionDetails()
	if len(conns) != 1 {
		t.Fatalf("connections %+v", conns)
	}
	ci := conns[0]
	if ci.Name != c.LocalAddr().String()+" -> "+b.addr || ci.User != "guest" || ci.Vhost != "/" || ci.Channels != 1 ||
		ci.AuthMechanism != "PLAIN" || ci.ClientProperties["product"] != "AMQP 0.9.1 Client" || ci.TLS || ci.ConnectedAtMs <= 0 {
		t.Errorf("connection %+v", ci)
	}
	chs := b.srv.Channels()
	if len(chs) != 1 || chs[0].Number != 1 || chs[0].Consumers != 1 || chs[0].Unacked != 2 || chs[0].Prefetch != 2 || chs[0].Connection != ci.Name {
		t.Errorf("channels %+v", chs)
	}
	cs := b.srv.Consumers()
	if len(cs) != 1 || cs[0].Tag != "tag-1" || cs[0].Queue != "snap" || !cs[0].AckRequired || cs[0].Prefetch != 2 || cs[0].Channel != 1 {
		t.Errorf("consumers %+v", cs)
	}
	bs := b.srv.Bindings()
	if len(bs) != 2 {
		t.Fatalf("bindings %+v", bs)
	}
	if x := bs[0]; x.Source != "hx" || x.Destination != "snap" || x.DestinationType != "queue" ||
		x.Arguments["kind"] != "a" || x.Arguments["n"] != int32(7) || x.Arguments["x-match"] != "all" {
		t.Errorf("queue binding %+v", x)
	}
	if x := bs[1]; x.Source != "hx" || x.Destination != "amq.direct" || x.DestinationType != "exchange" || x.RoutingKey != "k" {
		t.Errorf("exchange binding %+v", x)
	}
	if a := b.srv.ExchangeArguments("/", "hx"); len(a) != 1 || a["alternate-exchange"] != "amq.fanout" {
		t.Errorf("exchange hx arguments %v", a)
	}
	if a := b.srv.QueueArguments("/", "snap"); a != nil {
		t.Errorf("queue snap arguments %v, want none", a)
	}
	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for len(b.srv.ConnectionDetails())+len(b.srv.Channels())+len(b.srv.Consumers()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("after close: %+v %+v %+v", b.srv.ConnectionDetails(), b.srv.Channels(), b.srv.Consumers())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestManagementSnapshotsUnderTraffic takes the snapshots while clients
// connect, consume, acknowledge and leave (run with -race).
func TestManagementSnapshotsUnderTraffic(t *testing.T) {
	b := startBroker(t)
	setup := b.channel()
	if _, err := setup.QueueDeclare("busy", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				c, err := amqp091.Dial(b.url())
				if err != nil {
					t.Error(err)
					return
				}
				ch, _ := c.Channel()
				ch.Qos(5, 0, w == 0)
				ch.Publish("", "busy", false, false, amqp091.Publishing{Body: []byte("m")})
				d, err := ch.Consume("busy", "", false, false, false, false, nil)
				if err == nil {
					select {
					case m := <-d:
						m.Ack(false)
					case <-time.After(50 * time.Millisecond):
					}
				}
				c.Close()
			}
		}()
	}
	seen, deadline := 0, time.Now().Add(10*time.Second)
	for seen < 50 && time.Now().Before(deadline) { // snapshots that caught a consumer at work
		b.srv.ConnectionDetails()
		b.srv.Channels()
		b.srv.Bindings()
		b.srv.Queues()
		if len(b.srv.Consumers()) > 0 {
			seen++
		}
	}
	stop.Store(true)
	wg.Wait()
	if seen < 50 {
		t.Errorf("only %d snapshots saw a consumer", seen)
	}
}

// TestManagementLogin: guest from loopback only; with ACL accounts, only
// an admin account with its secret key.
func TestManagementLogin(t *testing.T) {
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}
	remote := &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 40000}
	b := startBroker(t)
	if !b.srv.ManagementLogin("guest", "guest", loop) {
		t.Error("guest from loopback refused")
	}
	if b.srv.ManagementLogin("guest", "guest", remote) || b.srv.ManagementLogin("guest", "guest", nil) {
		t.Error("guest let in from beyond loopback")
	}
	if b.srv.ManagementLogin("guest", "x", loop) {
		t.Error("a wrong password let in")
	}
	rules, err := acl.Parse("plain_acl.yml", []byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	ab := &broker{t: t, dir: t.TempDir(), accounts: func() *acl.Rules { return rules }}
	ab.start()
	t.Cleanup(ab.stop)
	for _, c := range []struct {
		user, pass string
		from       net.Addr
		ok         bool
	}{
		{"admin01", "admin-secret", remote, true},
		{"admin01", "wrong", loop, false},
		{"worker01", "worker-secret", loop, false}, // not an admin
		{"guest", "guest", loop, false},
	} {
		if got := ab.srv.ManagementLogin(c.user, c.pass, c.from); got != c.ok {
			t.Errorf("%s/%s from %v: %v, want %v", c.user, c.pass, c.from, got, c.ok)
		}
	}
}
