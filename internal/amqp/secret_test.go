package amqp

import (
	"strings"
	"sync/atomic"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/acl"
)

// connection.update-secret re-checks the connection's user with the new
// secret: accepted, the account's current permissions apply; refused,
// the connection is closed with 530 NOT_ALLOWED (as RabbitMQ).
func TestUpdateSecret(t *testing.T) {
	parse := func(text string) *acl.Rules {
		r, err := acl.Parse("plain_acl.yml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	var rules atomic.Pointer[acl.Rules]
	rules.Store(parse(testACL))
	b := &broker{t: t, dir: t.TempDir(), accounts: func() *acl.Rules { return rules.Load() }}
	b.start()
	t.Cleanup(b.stop)
	c, err := amqp091.Dial("amqp://worker01:worker-secret@" + b.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.UpdateSecret("worker-secret", "refresh"); err != nil {
		t.Fatalf("the same secret: %v", err)
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("jobs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	// The secret rotates, and the account loses jobs: the new secret is
	// taken and the new permissions apply.
	rules.Store(parse(strings.Replace(strings.Replace(testACL, "worker-secret", "rotated", 1), "jobs=PUB|SUB", "jobs=DENY", 1)))
	if err := c.UpdateSecret("rotated", "token refreshed"); err != nil {
		t.Fatalf("the rotated secret: %v", err)
	}
	if err := exception(t, ch, func(ch *amqp091.Channel) error {
		_, err := ch.QueueDeclare("jobs", true, false, false, false, nil)
		return err
	}); !isCode(err, 403) {
		t.Fatalf("declare after the account lost the queue: %v, want 403", err)
	}
	closed := c.NotifyClose(make(chan *amqp091.Error, 1))
	if err := c.UpdateSecret("worker-secret", "stale"); err == nil {
		t.Fatal("a secret that no longer authenticates was accepted")
	}
	if e := <-closed; e == nil || e.Code != 530 || !e.Server {
		t.Fatalf("connection closed with %v, want 530 from the server", e)
	}

	// Without ACL: guest's secret is guest.
	b2 := startBroker(t)
	g := b2.dial()
	if err := g.UpdateSecret("guest", "refresh"); err != nil {
		t.Fatal(err)
	}
	closed = g.NotifyClose(make(chan *amqp091.Error, 1))
	g.UpdateSecret("not-guest", "bad")
	if e := <-closed; e == nil || e.Code != 530 {
		t.Fatalf("guest with another secret: %v, want 530", e)
	}
}
