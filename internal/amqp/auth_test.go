package amqp

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/acl"
)

const testACL = `
accounts:
  - accessKey: worker01
    secretKey: worker-secret
    defaultTopicPerm: DENY
    topicPerms:
      - jobs=PUB|SUB
      - results=PUB
      - feed=SUB
  - accessKey: admin01
    secretKey: admin-secret
    admin: true
`

// With ACL accounts, PLAIN checks access key and secret key, guest is
// refused, and each method needs the account's permission on the queue or
// exchange it names (403 otherwise).
func TestACLAccountsAndPermissions(t *testing.T) {
	rules, err := acl.Parse("plain_acl.yml", []byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, dir: t.TempDir(), accounts: func() *acl.Rules { return rules }}
	b.start()
	t.Cleanup(b.stop)
	url := func(user, pass string) string { return "amqp://" + user + ":" + pass + "@" + b.addr + "/" }
	for _, up := range [][2]string{{"guest", "guest"}, {"worker01", "wrong"}, {"nobody00", "worker-secret"}} {
		if c, err := amqp091.Dial(url(up[0], up[1])); err == nil {
			c.Close()
			t.Fatalf("%s/%s was let in", up[0], up[1])
		} else if !isCode(err, 403) {
			t.Fatalf("%s: %v, want 403", up[0], err)
		}
	}
	admin, err := amqp091.Dial(url("admin01", "admin-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ach, _ := admin.Channel()
	for _, q := range []string{"jobs", "results", "feed", "secret"} {
		if _, err := ach.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	publishConfirmed(t, ach, "feed", "news")
	publishConfirmed(t, ach, "secret", "s")

	w, err := amqp091.Dial(url("worker01", "worker-secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ch := func() *amqp091.Channel {
		c, err := w.Channel()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	wch := ch()
	publishConfirmed(t, wch, "jobs", "j1") // PUB|SUB
	if d, ok, err := wch.Get("jobs", true); err != nil || !ok || string(d.Body) != "j1" {
		t.Fatalf("get jobs: %v %v", ok, err)
	}
	publishConfirmed(t, wch, "results", "r1") // PUB
	if d, ok, err := wch.Get("feed", true); err != nil || !ok || string(d.Body) != "news" {
		t.Fatalf("get feed: %v %v", ok, err) // SUB
	}
	for name, f := range map[string]func(*amqp091.Channel) error{
		"get results (PUB only)": func(c *amqp091.Channel) error { _, _, err := c.Get("results", true); return err },
		"consume secret (DENY)": func(c *amqp091.Channel) error {
			_, err := c.Consume("secret", "", false, false, false, false, nil)
			return err
		},
		"declare secret": func(c *amqp091.Channel) error {
			_, err := c.QueueDeclare("secret", true, false, false, false, nil)
			return err
		},
		"delete feed": func(c *amqp091.Channel) error { _, err := c.QueueDelete("secret", false, false, false); return err },
		"declare exchange": func(c *amqp091.Channel) error {
			return c.ExchangeDeclare("x", "fanout", true, false, false, false, nil)
		},
		"publish to feed (SUB only)": func(c *amqp091.Channel) error {
			c.Publish("", "feed", false, false, amqp091.Publishing{Body: []byte("x")})
			_, err := c.QueueDeclarePassive("jobs", true, false, false, false, nil)
			return err
		},
	} {
		if err := exception(t, ch(), f); !isCode(err, 403) {
			t.Errorf("%s: %v, want 403", name, err)
		}
	}
	if q, err := ach.QueueDeclarePassive("feed", true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("feed after the refused publish: %+v %v", q, err)
	}
}

// A queue over a Keel topic (x-keel-topic) reads and writes that topic:
// declaring one needs SUB on the topic, and a publish routed to it PUB on
// the topic, whatever the account holds on the queue's own name.
func TestACLQueueOverKeelTopicNeedsTheTopicsPermissions(t *testing.T) {
	rules, err := acl.Parse("plain_acl.yml", []byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, dir: t.TempDir(), accounts: func() *acl.Rules { return rules }}
	b.start()
	t.Cleanup(b.stop)
	w, err := amqp091.Dial("amqp://worker01:worker-secret@" + b.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ch := func() *amqp091.Channel {
		c, err := w.Channel()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	over := func(topic string) amqp091.Table { return amqp091.Table{ArgKeelTopic: topic} }
	for name, f := range map[string]func(*amqp091.Channel) error{
		"jobs (PUB|SUB) over secret (DENY)": func(c *amqp091.Channel) error {
			_, err := c.QueueDeclare("jobs", true, false, false, false, over("secret"))
			return err
		},
		"jobs (PUB|SUB) over results (PUB only)": func(c *amqp091.Channel) error {
			_, err := c.QueueDeclare("jobs", true, false, false, false, over("results"))
			return err
		},
		"server-named over secret (DENY)": func(c *amqp091.Channel) error {
			_, err := c.QueueDeclare("", false, false, true, false, over("secret"))
			return err
		},
	} {
		if err := exception(t, ch(), f); !isCode(err, 403) {
			t.Errorf("declare %s: %v, want 403", name, err)
		}
	}
	// SUB on the topic: the queue may be declared and read, but a
	// publish into it would write the topic, which needs PUB.
	wch := ch()
	if _, err := wch.QueueDeclare("jobs", true, false, false, false, over("feed")); err != nil {
		t.Fatalf("declare jobs over feed (SUB): %v", err)
	}
	if err := exception(t, ch(), func(c *amqp091.Channel) error {
		c.Publish("", "jobs", false, false, amqp091.Publishing{Body: []byte("x")})
		_, err := c.QueueDeclarePassive("jobs", true, false, false, false, nil)
		return err
	}); !isCode(err, 403) {
		t.Errorf("publish to jobs over feed (SUB only): %v, want 403", err)
	}
	if q, err := wch.QueueDeclarePassive("jobs", true, false, false, false, nil); err != nil || q.Messages != 0 {
		t.Fatalf("jobs after the refused publish: %+v %v", q, err)
	}
	if n := b.st.MaxOffset("feed", queueID); n != 0 {
		t.Fatalf("topic feed holds %d entries after the refused publish", n)
	}
}

// Binding to an exchange is reading it: queue.bind needs SUB on the
// exchange and exchange.bind SUB on the source, so an account that may
// only publish to an exchange cannot bind a queue of its own to it and
// read what others publish there.
func TestACLBindingNeedsSUBOnTheExchange(t *testing.T) {
	rules, err := acl.Parse("plain_acl.yml", []byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, dir: t.TempDir(), accounts: func() *acl.Rules { return rules }}
	b.start()
	t.Cleanup(b.stop)
	admin, err := amqp091.Dial("amqp://admin01:admin-secret@" + b.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ach, _ := admin.Channel()
	for _, x := range []string{"results", "feed", "jobs"} {
		if err := ach.ExchangeDeclare(x, "fanout", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ach.QueueDeclare("jobs", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	w, err := amqp091.Dial("amqp://worker01:worker-secret@" + b.addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ch := func() *amqp091.Channel {
		c, err := w.Channel()
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for name, f := range map[string]func(*amqp091.Channel) error{
		"queue jobs to exchange results (PUB only)": func(c *amqp091.Channel) error {
			return c.QueueBind("jobs", "", "results", false, nil)
		},
		"exchange jobs to source results (PUB only)": func(c *amqp091.Channel) error {
			return c.ExchangeBind("jobs", "", "results", false, nil)
		},
	} {
		if err := exception(t, ch(), f); !isCode(err, 403) {
			t.Errorf("bind %s: %v, want 403", name, err)
		}
	}
	// SUB on the exchange: allowed.
	wch := ch()
	if err := wch.QueueBind("jobs", "", "feed", false, nil); err != nil {
		t.Fatalf("bind queue jobs to exchange feed (SUB): %v", err)
	}
	if err := wch.ExchangeBind("jobs", "", "feed", false, nil); err != nil {
		t.Fatalf("bind exchange jobs to source feed (SUB): %v", err)
	}
	publishTo(t, ach, "results", "", "private")
	publishTo(t, ach, "feed", "", "public")
	d, ok, err := wch.Get("jobs", true)
	if err != nil || !ok || string(d.Body) != "public" {
		t.Fatalf("jobs: %q %v %v, want only what feed had", d.Body, ok, err)
	}
	if d, ok, _ := wch.Get("jobs", true); ok {
		t.Fatalf("jobs also holds %q", d.Body)
	}
}
