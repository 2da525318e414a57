package replication

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestSyncMasterAnswersAtTheAckWhileDispatchIsBusy: the slave's ack
// answers the sends it covers from the master's ack reader, in one pass,
// even while the master's dispatcher is inside a round (held here in a
// Visible subscriber): a send does not wait for dispatch, and it is still
// answered only once the slave has flushed it.
func TestSyncMasterAnswersAtTheAckWhileDispatchIsBusy(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 2)
	defer p.stopMaster()
	hold, held := make(chan struct{}), make(chan struct{}, 1)
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	defer release()
	remove := p.master.OnVisible(func(topic string, _ int32, _ int64, _ int64) {
		if topic == "A" {
			held <- struct{}{}
			<-hold
		}
	})
	defer remove()
	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	waitUntil(t, "slave in sync", func() bool { return p.m.InSync() == 2 })

	if r := p.master.PutMessages(context.Background(), []*message.Message{msg("A", "first")}); !r.OK() {
		t.Fatalf("first put: %v %v", r.Status, r.Err)
	}
	<-held // the master's dispatcher is inside its round, dispatching A

	const n = 16
	results := make(chan store.PutResult, n)
	var ends []int64
	for i := range n {
		m := msg("B", "waiting "+string(rune('a'+i)))
		r, pending := p.master.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r store.PutResult) { results <- r })
		if !pending {
			t.Fatalf("put %d not pending: %v %v", i, r.Status, r.Err)
		}
		ends = append(ends, m.PhysOffset+int64(m.StoredSize())+4)
	}
	for i := range n {
		select {
		case r := <-results:
			if !r.OK() {
				t.Fatalf("put %d while dispatch is busy: %v %v", i, r.Status, r.Err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("put %d not answered while the master's dispatcher is busy", i)
		}
	}
	// Answered only once the slave had them durably.
	if got, want := p.slave.Offset(store.Flushed), ends[n-1]; got < want {
		t.Fatalf("answered with the slave flushed to %d, below %d", got, want)
	}
	release()
}
