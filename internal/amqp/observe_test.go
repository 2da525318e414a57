package amqp

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/doorstats"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

type recordingObserver struct {
	mu        sync.Mutex
	results   map[string]int // result -> publishes
	stored    int
	delivered int
}

func (o *recordingObserver) OnSend(topic string, msgs, bytes int, result string, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.results[result]++
	o.stored += msgs
}

func (o *recordingObserver) OnDeliver(topic string, msgs int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.delivered += msgs
}

// TestObserverAndTraffic: publishes and deliveries reach the Observer,
// and connections, methods, errors and bytes the Traffic counters.
func TestObserverAndTraffic(t *testing.T) {
	obs := &recordingObserver{results: map[string]int{}}
	b := &broker{t: t, dir: t.TempDir(), traffic: &doorstats.Counters{}, observer: obs}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "q", "a", "b")
	publishConfirmed(t, ch, "nowhere", "c")
	msgs, err := ch.Consume("q", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	recv(t, msgs)
	recv(t, msgs)
	// A channel exception counts as an error.
	exception(t, b.channel(), func(c *amqp091.Channel) error {
		_, err := c.QueueDeclarePassive("missing", false, false, false, false, nil)
		return err
	})
	obs.mu.Lock()
	if obs.results["SUCCESS"] != 2 || obs.results["NO_ROUTE"] != 0 || len(obs.results) != 1 || obs.stored != 2 || obs.delivered != 2 {
		t.Errorf("observed %v, %d stored, %d delivered", obs.results, obs.stored, obs.delivered)
	}
	obs.mu.Unlock()
	s := b.traffic.Snapshot(doorstats.AMQP)
	if s.Accepted < 1 || s.Open < 1 || s.Requests < 8 || s.Errors < 1 || s.BytesIn == 0 || s.BytesOut == 0 {
		t.Errorf("traffic %+v", s)
	}
}

// TestConnections: an open connection is listed with its user, vhost and
// channels.
func TestConnections(t *testing.T) {
	b := startBroker(t)
	ch := b.channel()
	defer ch.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		cs := b.srv.Connections()
		if len(cs) == 1 && cs[0].User == "guest" && cs[0].Vhost == "/" && cs[0].Channels == 1 && cs[0].SinceMs > 0 &&
			strings.HasPrefix(cs[0].Remote, "127.0.0.1:") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("connections %+v", cs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
