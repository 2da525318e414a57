package amqp

import (
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/acl"
)

// Named vhosts are separate namespaces: the same queue name in two vhosts
// is two queues with their own messages and definitions, which survive a
// restart; a vhost not served is refused with 530.
func TestVhostsAreSeparate(t *testing.T) {
	b := &broker{t: t, dir: t.TempDir(), vhosts: []string{"prod", "/staging"}}
	b.start()
	t.Cleanup(b.stop)
	dial := func(vhost string) *amqp091.Channel {
		t.Helper()
		c, err := amqp091.DialConfig("amqp://guest:guest@"+b.addr+"/", amqp091.Config{Vhost: vhost})
		if err != nil {
			t.Fatalf("vhost %q: %v", vhost, err)
		}
		t.Cleanup(func() { c.Close() })
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	for _, vh := range []string{"/", "prod", "/staging"} {
		ch := dial(vh)
		// The same name with other flags in each vhost: no 406.
		if _, err := ch.QueueDeclare("orders", vh != "prod", false, false, false, amqp091.Table{"x-queue-type": "classic"}); err != nil {
			t.Fatalf("%s: %v", vh, err)
		}
		if err := ch.ExchangeDeclare("events", "fanout", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind("orders", "", "events", false, nil); err != nil {
			t.Fatal(err)
		}
		publishTo(t, ch, "events", "", "in "+vh)
	}
	b.restart()
	for _, vh := range []string{"/", "/staging"} { // prod's queue was not durable
		ch := dial(vh)
		d, ok, err := ch.Get("orders", true)
		if err != nil || !ok || string(d.Body) != "in "+vh {
			t.Fatalf("%s after restart: %v %v %q", vh, ok, err, d.Body)
		}
		if _, ok, _ := ch.Get("orders", true); ok {
			t.Fatalf("%s holds another vhost's message", vh)
		}
	}
	if _, err := dial("prod").QueueDeclarePassive("orders", false, false, false, false, nil); !isCode(err, 404) {
		t.Fatalf("prod's transient queue after a restart: %v", err)
	}
	if _, err := amqp091.DialConfig("amqp://guest:guest@"+b.addr+"/", amqp091.Config{Vhost: "nope"}); !isCode(err, 530) {
		t.Fatalf("a vhost not served: %v", err)
	}
	var infos []string
	for _, q := range b.srv.Queues() {
		infos = append(infos, q.Vhost+"|"+q.Name)
	}
	if len(infos) != 2 || infos[0] != "/|orders" || infos[1] != "/staging|orders" {
		t.Fatalf("Queues: %v", infos)
	}
}

// With ACL accounts, names in a vhost other than "/" are checked as
// "<vhost>/<name>".
func TestVhostNamesInACL(t *testing.T) {
	rules, err := acl.Parse("plain_acl.yml", []byte(`accounts:
  - accessKey: tenant01
    secretKey: tenant-secret
    defaultTopicPerm: DENY
    topicPerms: [prod/jobs=PUB|SUB]
`))
	if err != nil {
		t.Fatal(err)
	}
	b := &broker{t: t, dir: t.TempDir(), vhosts: []string{"prod"}, accounts: func() *acl.Rules { return rules }}
	b.start()
	t.Cleanup(b.stop)
	declare := func(vhost, queue string) error {
		c, err := amqp091.DialConfig("amqp://tenant01:tenant-secret@"+b.addr+"/", amqp091.Config{Vhost: vhost})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			t.Fatal(err)
		}
		_, err = ch.QueueDeclare(queue, true, false, false, false, nil)
		return err
	}
	if err := declare("prod", "jobs"); err != nil {
		t.Fatalf("prod/jobs: %v", err)
	}
	if err := declare("prod", "other"); !isCode(err, 403) {
		t.Fatalf("prod/other: %v, want 403", err)
	}
	if err := declare("/", "jobs"); !isCode(err, 403) {
		t.Fatalf("jobs in /: %v, want 403", err)
	}
}
