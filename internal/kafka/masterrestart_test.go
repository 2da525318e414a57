package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/keelmq/keel/internal/store"
)

// TestIdempotentRetryAfterSyncMasterRestart: a SYNC_MASTER restarted with
// an idempotent batch written but not replicated (so not in the queue yet)
// refuses the batch's retry with a retriable error instead of rebuilding
// the producer's window without it and storing the batch twice; once the
// slaves confirm the tail, the retry is answered with the original offset.
func TestIdempotentRetryAfterSyncMasterRestart(t *testing.T) {
	syncMaster := func(c *store.Config) {
		c.ExternalReplication = true
		c.ReplicationTimeout = 100 * time.Millisecond
	}
	n := startNodeStore(t, nil, Config{}, syncMaster)
	rc := dialRaw(t, n.addr)
	ir := rc.do(kmsg.NewPtrInitProducerIDRequest(), 4).(*kmsg.InitProducerIDResponse)
	if ir.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %+v", ir)
	}
	pid := ir.ProducerID
	if got := rc.produce(testBatchSeq(3, pid, 0, 0)); got.ErrorCode == 0 {
		t.Fatalf("a produce no slave confirmed succeeded: %+v", got)
	}
	n.stop()

	n2 := startNodeStore(t, n.fs, Config{}, syncMaster)
	if n2.st.VisibleOffset() >= n2.st.RecoveredEnd() {
		t.Fatalf("the test needs the batch undispatched: visible %d, recovered end %d", n2.st.VisibleOffset(), n2.st.RecoveredEnd())
	}
	written := n2.st.Offset(store.Written)
	rc = dialRaw(t, n2.addr)
	if got := rc.produce(testBatchSeq(3, pid, 0, 0)); got.ErrorCode != errNotEnoughReplicas {
		t.Fatalf("the retry before the tail is visible: code %d, want %d (NOT_ENOUGH_REPLICAS)", got.ErrorCode, errNotEnoughReplicas)
	}
	if w := n2.st.Offset(store.Written); w != written {
		t.Fatalf("the refused retry wrote: written %d, was %d", w, written)
	}
	n2.st.AdvanceReplicated(n2.st.RecoveredEnd()) // the slaves confirm the tail
	if err := n2.st.WaitFor(context.Background(), store.Visible, n2.st.RecoveredEnd(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// The retry is a duplicate of the batch at offset 0; the store answers
	// it once confirmed, which the test's slaves now do for what follows.
	done := make(chan kmsg.ProduceResponseTopicPartition, 1)
	go func() { done <- rc.produce(testBatchSeq(3, pid, 0, 0)) }()
	var got kmsg.ProduceResponseTopicPartition
	deadline := time.After(10 * time.Second)
wait:
	for {
		select {
		case got = <-done:
			break wait
		case <-deadline:
			t.Fatal("no answer to the retry")
		case <-time.After(5 * time.Millisecond):
			n2.st.AdvanceReplicated(n2.st.Offset(store.Written))
		}
	}
	if got.ErrorCode != 0 || got.BaseOffset != 0 {
		t.Fatalf("the retry once the tail is visible: code %d base %d, want the original offset 0", got.ErrorCode, got.BaseOffset)
	}
	if e := n2.st.MaxOffset("idem", 0); e != 3 {
		t.Fatalf("%d entries stored, want the batch's 3 once", e)
	}
}
