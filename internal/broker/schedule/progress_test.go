package schedule

import (
	"testing"
	"time"
)

// Progress reports the durable cursor of every schedule queue: 0 while an
// entry waits, past it once it was delivered and the cursor written, and
// the same after a restart.
func TestProgressFollowsDurableDelivery(t *testing.T) {
	e := newEnv(t, []time.Duration{time.Second})
	e.schedule(newMsg("orders", 0, "a", nil), 1, 0)
	e.settle()
	if got := e.svc.Progress()[LevelTopic][0]; got != 0 {
		t.Fatalf("progress %d before the delivery", got)
	}
	e.advance(time.Second)
	e.waitVisible("orders", 0, 1)
	waitFor(t, "the cursor to be saved", func() bool { return e.svc.Progress()[LevelTopic][0] == 1 })
	e.restart()
	if got := e.svc.Progress()[LevelTopic][0]; got != 1 {
		t.Fatalf("progress %d after a restart, want 1", got)
	}
}
