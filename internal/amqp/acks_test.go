package amqp

import (
	"testing"

	"github.com/keelmq/keel/internal/vfs"
)

// A write of acks.json that fails is retried at the next interval: the
// settlement it carried is not lost with the dirty flags the snapshot
// cleared, and after a crash the settled message is not delivered again.
func TestAckStateWriteFailureIsRetried(t *testing.T) {
	efs := vfs.NewErrorFS(vfs.OS{})
	b := &broker{t: t, dir: t.TempDir(), fs: efs}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	publishConfirmed(t, ch, "q", "once")
	q := b.srv.vhosts["/"].queue("q")
	efs.InjectWriteError(acksFile)
	d, ok, err := ch.Get("q", false)
	if err != nil || !ok {
		t.Fatalf("get: %v %v", ok, err)
	}
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the ack to settle the message", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.floor >= 1
	})
	// A write that fails from now on: one carrying the settlement or,
	// were it not retried, none at all (and the wait fails).
	n := efs.Injected(vfs.OpWrite)
	waitUntil(t, "a write of acks.json to fail", func() bool { return efs.Injected(vfs.OpWrite) > n })
	efs.ClearRules()
	waitUntil(t, "the settlement to be written", func() bool { return q.savedFloor.Load() >= 1 })
	b.crash()
	b.start()
	ch = b.channel()
	if d, ok, _ := ch.Get("q", true); ok {
		t.Fatalf("after a crash the settled message came back: %q (redelivered %v)", d.Body, d.Redelivered)
	}
}
