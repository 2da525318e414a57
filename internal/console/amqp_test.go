package console

import (
	"io"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/admin"
)

// GET /api/amqp shows what the broker's AMQP front door reports (over the
// admin request), and that a broker without one has none; the page is in
// the navigation.
func TestAPIAMQP(t *testing.T) {
	c := startCluster(t, false)
	var bs []admin.BrokerAMQP
	c.getJSON("/api/amqp", 200, &bs)
	if len(bs) != 1 || bs[0].Enabled || len(bs[0].Queues) != 0 || bs[0].Err != "" {
		t.Fatalf("without AMQP: %+v", bs)
	}
	q := admin.AMQPQueue{Vhost: "/", Name: "orders", Type: "quorum", Durable: true, Ready: 7, Unacked: 2, Consumers: 1,
		MessageTTLMs: -1, MaxLength: -1, DeliveryLimit: 5, DeadLetterExchange: "dlx", OldestUnsettledAgeMs: 1500, Published: 9}
	e := admin.AMQPExchange{Name: "events", Type: "topic", Durable: true, Bindings: 2}
	conn := admin.AMQPConnection{Remote: "127.0.0.1:50412", User: "guest", Vhost: "/", Channels: 2, SinceMs: 1700000000000}
	c.b.SetAMQPInfo(func() (any, any, any) {
		return []admin.AMQPQueue{q}, []admin.AMQPExchange{e}, []admin.AMQPConnection{conn}
	})
	c.getJSON("/api/amqp", 200, &bs)
	if len(bs) != 1 || !bs[0].Enabled || len(bs[0].Queues) != 1 || bs[0].Queues[0] != q ||
		len(bs[0].Exchanges) != 1 || bs[0].Exchanges[0] != e || len(bs[0].Connections) != 1 || bs[0].Connections[0] != conn {
		t.Fatalf("with AMQP: %+v", bs)
	}
	if page := c.getText("/"); !strings.Contains(page, `href="#/amqp"`) {
		t.Fatal("no AMQP page in the navigation")
	}
	if js := c.getText("/app.js"); !strings.Contains(js, `api("amqp")`) {
		t.Fatal("app.js does not load /api/amqp")
	}
}

func (c *cluster) getText(path string) string {
	c.t.Helper()
	resp, err := c.get(path)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return string(b)
}
