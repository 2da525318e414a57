package amqp

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
)

// agingStore makes every closed CommitLog segment expired at once and runs
// retention every 10 ms, at any hour.
func agingStore(c *store.Config) {
	c.CommitLogSegmentBytes = 64 << 10
	c.MaxMessageBytes = 16 << 10
	c.FileReservedTime = time.Millisecond
	hours := make([]string, 24)
	for h := range hours {
		hours[h] = fmt.Sprintf("%02d", h)
	}
	c.DeleteWhen = strings.Join(hours, ";")
	c.RetentionCheckInterval = 10 * time.Millisecond
}

// Age-based retention deletes no unsettled AMQP message: a queue's settled
// floor holds its segments while older, settled ones go; once the queue is
// settled its segments go too.
func TestRetentionKeepsUnsettledMessages(t *testing.T) {
	b := startBrokerWith(t, agingStore)
	ch := b.channel()
	for _, q := range []string{"drained", "held", "pad"} {
		if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	fill := strings.Repeat("x", 4000)
	bodies := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%03d-%s", prefix, i, fill))
		}
		return out
	}
	// drained: about three segments, consumed and acknowledged; then held:
	// three more nobody consumes; then pad, so that held's are not in the
	// last segment (never deleted).
	publishConfirmed(t, ch, "drained", bodies("d", 48)...)
	for range 48 {
		d, ok, err := ch.Get("drained", false)
		if err != nil || !ok {
			t.Fatalf("get: %v %v", ok, err)
		}
		d.Ack(false)
	}
	held := bodies("h", 48)
	publishConfirmed(t, ch, "held", held...)
	publishConfirmed(t, ch, "pad", bodies("p", 32)...)

	topic := func(name string) string { return b.srv.vhosts["/"].queue(name).topic }
	waitUntil(t, "retention deletes the drained queue's segments", func() bool {
		return b.st.MinOffset(topic("drained"), queueID) > 0
	})
	// The round that deleted drained's segments saw held's as expired too.
	if lo := b.st.MinOffset(topic("held"), queueID); lo != 0 {
		t.Fatalf("retention deleted the unsettled messages of held below offset %d", lo)
	}
	for i, want := range held {
		d, ok, err := ch.Get("held", false)
		if err != nil || !ok || string(d.Body) != want {
			t.Fatalf("held message %d: %v %v %.12q", i, ok, err, d.Body)
		}
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "retention deletes held's segments once it is settled", func() bool {
		return b.st.MinOffset(topic("held"), queueID) > 0
	})
}

// waitUntil polls cond for up to 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
