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
