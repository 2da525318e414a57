package amqp

import (
	"slices"
	"strings"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/acl"
)

// TestForwardDeadLetterAcrossGroups: messages dead-lettered on a (reject
// without requeue, TTL, max-length, delivery limit) whose dead-letter
// routing reaches a queue of b (through the default exchange, and through
// a fanout exchange of a bound to b's queue) arrive there with x-death;
// the originals are settled. While b is down, an expired message stays
// in its queue (in flight, not dropped) and arrives once b is back.
func TestForwardDeadLetterAcrossGroups(t *testing.T) {
	a, b := startPair(t)
	for _, n := range []string{"dlq", "dlq2"} {
		if _, err := b.channel().QueueDeclare(n, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	cha := a.channel()
	if err := cha.ExchangeDeclare("dlx", "fanout", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := cha.QueueBind("dlq2", "", "dlx", false, nil); err != nil {
		t.Fatal(err)
	}
	toB := amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}
	declare := func(name string, extra amqp091.Table) {
		t.Helper()
		args := amqp091.Table{}
		for k, v := range toB {
			args[k] = v
		}
		for k, v := range extra {
			args[k] = v
		}
		if _, err := a.channel().QueueDeclare(name, true, false, false, false, args); err != nil {
			t.Fatal(err)
		}
	}
	declare("src-reject", nil)
	declare("src-ttl", amqp091.Table{"x-message-ttl": int32(1)})
	declare("src-maxlen", amqp091.Table{"x-max-length": int32(1)})
	declare("src-limit", amqp091.Table{"x-queue-type": "quorum", "x-delivery-limit": int32(0)})
	if _, err := a.channel().QueueDeclare("src-ex", true, false, false, false, amqp091.Table{"x-dead-letter-exchange": "dlx"}); err != nil {
		t.Fatal(err)
	}

	publishConfirmed(t, a.channel(), "src-reject", "rejected")
	publishConfirmed(t, a.channel(), "src-ttl", "expired")
	publishConfirmed(t, a.channel(), "src-maxlen", "maxlen", "kept")
	publishConfirmed(t, a.channel(), "src-limit", "limit")
	publishConfirmed(t, a.channel(), "src-ex", "via-exchange")
	ch := a.channel()
	for _, n := range []string{"src-reject", "src-ex"} {
		d, ok, err := ch.Get(n, false)
		if err != nil || !ok {
			t.Fatalf("get %s: %v %v", n, ok, err)
		}
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
	}
	d, ok, err := ch.Get("src-limit", false)
	if err != nil || !ok {
		t.Fatalf("get src-limit: %v %v", ok, err)
	}
	if err := d.Nack(false, true); err != nil { // requeued past the limit of 0
		t.Fatal(err)
	}
	reasons := map[string]string{}
	waitUntil(t, "four copies in b's dlq", func() bool { return queueCount(t, b, "dlq") == 4 })
	chb := b.channel()
	for range 4 {
		d, ok, err := chb.Get("dlq", true)
		if err != nil || !ok {
			t.Fatalf("get dlq: %v %v", ok, err)
		}
		deaths, _ := d.Headers["x-death"].([]any)
		if len(deaths) != 1 {
			t.Fatalf("%q: x-death %v", d.Body, d.Headers["x-death"])
		}
		reasons[string(d.Body)] = deaths[0].(amqp091.Table)["reason"].(string)
	}
	want := map[string]string{"rejected": "rejected", "expired": "expired", "maxlen": "maxlen", "limit": "delivery_limit"}
	for body, r := range want {
		if reasons[body] != r {
			t.Fatalf("copies in dlq: %v, want %v", reasons, want)
		}
	}
	waitUntil(t, "the copy through the exchange", func() bool { return queueCount(t, b, "dlq2") == 1 })
	for n, left := range map[string]int{"src-reject": 0, "src-ttl": 0, "src-maxlen": 1, "src-limit": 0, "src-ex": 0} {
		if got := queueCount(t, a, n); got != left {
			t.Fatalf("%s holds %d, want %d", n, got, left)
		}
	}
	src := a.srv.vhosts["/"].queue("src-ttl")
	unsettled := func() int {
		src.mu.Lock()
		defer src.mu.Unlock()
		return len(src.inflight)
	}
	if n := unsettled(); n != 0 {
		t.Fatalf("src-ttl has %d in flight", n)
	}

	// b down: the expired message is kept (in flight) and tried again.
	b.crash()
	publishConfirmed(t, a.channel(), "src-ttl", "while-down")
	waitUntil(t, "the expired message taken out for dead-lettering", func() bool { return unsettled() == 1 })
	if got := queueCount(t, a, "src-ttl"); got != 0 {
		t.Fatalf("src-ttl holds %d ready", got)
	}
	b.start()
	waitUntil(t, "the original settled", func() bool { return unsettled() == 0 })
	// The crash may have lost b's record of the four copies taken above
	// (redelivered then); the new copy is there once.
	got := drain(t, b.channel(), "dlq")
	if n := len(slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s != "while-down" })); n != 1 {
		t.Fatalf("dlq after b came back: %q", got)
	}
}

// TestForwardDeadLetterKeptOverRestart: a message expired on a while the
// dead-letter target's home b is down is kept over a restart of a (the
// original is unsettled: dead-lettered again after the start) and its copy
// reaches b once b is back.
func TestForwardDeadLetterKeptOverRestart(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("dlq", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	args := amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq", "x-message-ttl": int32(1)}
	if _, err := a.channel().QueueDeclare("src", true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
	b.crash()
	publishConfirmed(t, a.channel(), "src", "kept")
	inFlight := func() int {
		q := a.srv.vhosts["/"].queue("src")
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.inflight)
	}
	waitUntil(t, "the expired message taken out for dead-lettering", func() bool { return inFlight() == 1 })
	a.restart()
	waitUntil(t, "the message expired again after the restart", func() bool { return inFlight() == 1 })
	b.start()
	waitUntil(t, "the original settled once b is back", func() bool { return inFlight() == 0 })
	if got := drain(t, b.channel(), "dlq"); len(got) != 1 || got[0] != "kept" {
		t.Fatalf("dlq: %q", got)
	}
	if n := queueCount(t, a, "src"); n != 0 {
		t.Fatalf("src holds %d", n)
	}
}

// TestForwardDeadLetterPeerAccount: under access control a dead-letter
// copy for another group's queue is handed over as Config.PeerAccount;
// as guest (no peer account) the home refuses the login and the copy
// waits on the source queue, taken once the member logs in as an account.
func TestForwardDeadLetterPeerAccount(t *testing.T) {
	rules, err := acl.Parse("plain_acl.yml", []byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	accounts := func() *acl.Rules { return rules }
	for _, c := range []struct {
		peer  string
		taken bool
	}{{"", false}, {"admin01", true}} {
		ca, cb := &staticCluster{}, &staticCluster{}
		var logs syncBuf
		a := &broker{t: t, dir: t.TempDir(), cluster: ca, group: "a", accounts: accounts, peerAccount: c.peer, logs: &logs}
		a.start()
		b := &broker{t: t, dir: t.TempDir(), cluster: cb, group: "b", accounts: accounts}
		b.start()
		ca.set([]Peer{{Group: "b", Addr: b.addr}})
		cb.set([]Peer{{Group: "a", Addr: a.addr}})
		admin := func(x *broker) *amqp091.Channel {
			t.Helper()
			conn, err := amqp091.Dial("amqp://admin01:admin-secret@" + x.addr + "/")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })
			ch, err := conn.Channel()
			if err != nil {
				t.Fatal(err)
			}
			return ch
		}
		if _, err := admin(b).QueueDeclare("dlq", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		cha := admin(a)
		if _, err := cha.QueueDeclare("src", true, false, false, false,
			amqp091.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": "dlq"}); err != nil {
			t.Fatal(err)
		}
		publishConfirmed(t, cha, "src", "rejected")
		d, ok, err := cha.Get("src", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		if err := d.Reject(false); err != nil {
			t.Fatal(err)
		}
		count := func() int {
			q, err := admin(b).QueueDeclarePassive("dlq", true, false, false, false, nil)
			if err != nil {
				t.Fatal(err)
			}
			return q.Messages
		}
		if c.taken {
			waitUntil(t, "the copy in b's dlq", func() bool { return count() == 1 })
		} else {
			// Two attempts refused (a second apart): the home takes no guest.
			const refused = "dead-letter copy for another group's queue not taken"
			waitUntil(t, "two refused attempts", func() bool { return strings.Count(logs.String(), refused) >= 2 })
			if n := count(); n != 0 {
				t.Fatalf("as guest under access control the copy was taken (%d)", n)
			}
			if q, err := cha.QueueDeclarePassive("src", true, false, false, false, nil); err != nil {
				t.Fatal(err)
			} else if q.Messages != 0 {
				t.Fatalf("the original was delivered again (%d ready) while its copy waits", q.Messages)
			}
		}
		a.stop()
		b.stop()
	}
}
