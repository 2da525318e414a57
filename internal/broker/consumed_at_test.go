package broker

import (
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// "Last consumed" is when the group's offset moved, not the store time of
// the last consumed message: a message stored a minute before the group
// consumes it keeps its store time, and the progress says when the group
// consumed it. The first unconsumed message's store time is reported too.
func TestConsumedAtIsWhenTheOffsetMoved(t *testing.T) {
	clock := time.Now().Add(time.Minute) // the broker's clock runs a minute ahead of the store's
	e := startEnv(t, func(c *Config) { c.Now = func() time.Time { return clock } })
	cl := e.dial()
	for i := 0; i < 3; i++ {
		wantCode(t, cl.sendV1("T", 0, "", []byte("x")), remoting.ResSuccess)
	}
	e.waitMax("T", 0, 3)
	progress := func() QueueProgress {
		for _, p := range e.b.ConsumeProgress("g", "T") {
			if p.QueueID == 0 {
				return p
			}
		}
		t.Fatal("no progress for T/0")
		return QueueProgress{}
	}
	if p := progress(); p.ConsumedAt != 0 || e.b.OldestUnconsumedTime(p) == 0 {
		t.Fatalf("before any commit: %+v oldest %d", p, e.b.OldestUnconsumedTime(p))
	}
	oldest := e.b.OldestUnconsumedTime(progress())
	if d := time.Since(time.UnixMilli(oldest)); d < 0 || d > time.Minute {
		t.Errorf("oldest unconsumed stored %v ago", d)
	}
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": "2"}, nil), remoting.ResSuccess)
	p := progress()
	if p.ConsumedAt != clock.UnixMilli() {
		t.Errorf("consumed at %d, want the commit's time %d", p.ConsumedAt, clock.UnixMilli())
	}
	if last := e.b.core.StoreTimeAt("T", 0, 1); last >= p.ConsumedAt-30_000 {
		t.Errorf("store time %d of the last consumed message is not the minute-old one the test arranged (consumed at %d)", last, p.ConsumedAt)
	}
	// The same offset committed again (clients commit every 5 s) is no new
	// consumption.
	clock = clock.Add(10 * time.Second)
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": "2"}, nil), remoting.ResSuccess)
	if got := progress().ConsumedAt; got != p.ConsumedAt {
		t.Errorf("an unchanged commit moved consumed-at to %d", got)
	}
	// Caught up: nothing unconsumed.
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "T", "queueId": "0", "commitOffset": "3"}, nil), remoting.ResSuccess)
	if p := progress(); e.b.OldestUnconsumedTime(p) != 0 || p.ConsumedAt != clock.UnixMilli() {
		t.Errorf("caught up: %+v oldest %d", p, e.b.OldestUnconsumedTime(p))
	}
}
