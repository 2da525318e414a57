package store

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/vfs"
)

func syncMasterConfig(fs vfs.FS) Config {
	cfg := testConfig(fs)
	cfg.FlushDiskType = SyncFlush
	cfg.ExternalReplication = true
	cfg.ReplicationTimeout = 50 * time.Millisecond
	return cfg
}

// putUnreplicated writes m on a synchronous master whose replicas never
// confirm it; the put is answered with the replication timeout.
func putUnreplicated(t *testing.T, s *Store, m *message.Message) {
	t.Helper()
	done := make(chan PutResult, 1)
	if r, pending := s.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r PutResult) { done <- r }); !pending {
		t.Fatalf("put not pending: %v", r)
	}
	if r := <-done; r.Status == PutOK {
		t.Fatalf("an unreplicated put was acknowledged: %v", r)
	}
}

// TestSyncMasterRestartHidesUnreplicatedTail: a synchronous master that
// restarts with a record written but never replicated does not show it
// (Visible <= Replicated, as before the restart) until the replicas
// confirm it; then it is dispatched at its queue offset, and a new put
// gets the next one.
func TestSyncMasterRestartHidesUnreplicatedTail(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, syncMasterConfig(fs))
	putUnreplicated(t, s, newMsg("Tail", 0, "never-replicated", nil))
	if n := s.MaxOffset("Tail", 0); n != 0 {
		t.Fatalf("before the restart the queue has %d entries", n)
	}
	written := s.Offset(Written)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, syncMasterConfig(fs))
	defer func() { s.Close() }()
	if got := s.Offset(Written); got != written {
		t.Fatalf("written %d after the restart, want %d", got, written)
	}
	if n := s.MaxOffset("Tail", 0); n != 0 {
		t.Fatalf("after the restart the queue shows %d unreplicated entries (visible %d, replicated %d, written %d)",
			n, s.VisibleOffset(), s.Offset(Replicated), s.Offset(Written))
	}
	if v, r := s.VisibleOffset(), s.Offset(Replicated); v > r {
		t.Fatalf("visible %d passes replicated %d", v, r)
	}
	if s.RecoveredEnd() != written {
		t.Fatalf("RecoveredEnd %d, want %d", s.RecoveredEnd(), written)
	}

	// The replicas confirm it: it appears, at offset 0.
	s.AdvanceReplicated(written)
	waitVisible(t, s, "Tail", 0, 1)
	r, err := s.GetMessage("Tail", 0, 0, 10, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(bodies(r)); r.Status != Found || got != "[never-replicated]" {
		t.Fatalf("read after replication: %v %s", r.Status, got)
	}
	r.Release()
	// A new put takes the next queue offset.
	m := newMsg("Tail", 0, "next", nil)
	done := make(chan PutResult, 1)
	s.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r PutResult) { done <- r })
	s.AdvanceReplicated(s.Offset(Written))
	if r := <-done; r.Status != PutOK {
		t.Fatalf("put: %v", r)
	}
	if m.QueueOffset != 1 {
		t.Fatalf("new put at queue offset %d, want 1", m.QueueOffset)
	}
}

// TestUnreplicatedTailShownWithoutReplication: the same files opened by a
// store without ExternalReplication (the broker restarted as a single
// broker or an ASYNC_MASTER) show everything, as the local disk decides.
func TestUnreplicatedTailShownWithoutReplication(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, syncMasterConfig(fs))
	putUnreplicated(t, s, newMsg("Tail", 0, "x", nil))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(fs)
	cfg.FlushDiskType = SyncFlush
	s = mustOpen(t, cfg)
	defer s.Close()
	waitVisible(t, s, "Tail", 0, 1)
}

// TestSyncMasterRestartReplaysSystemTail: a synchronous master's
// SubscribeSystem replays the system records to the written end, past
// what recovery dispatched (its metadata files may have lost them), and
// the dispatcher does not hand them over again once replicated.
func TestSyncMasterRestartReplaysSystemTail(t *testing.T) {
	fs := vfs.NewMem()
	s := mustOpen(t, syncMasterConfig(fs))
	rec, err := record.AppendSystemRecord(nil, &record.SystemRecord{Kind: record.KindOffsetsDelete, Group: "tail"})
	if err != nil {
		t.Fatal(err)
	}
	s.PutRecord(context.Background(), rec) // times out: not replicated
	written := s.Offset(Written)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = mustOpen(t, syncMasterConfig(fs))
	defer s.Close()
	if s.VisibleOffset() >= written {
		t.Fatalf("the test needs the system record undispatched: visible %d, written %d", s.VisibleOffset(), written)
	}
	var mu sync.Mutex
	var got []string
	end, err := s.SubscribeSystem(0, func(_, _ int64, body []byte) error {
		r, err := record.DecodeSystem(body)
		if err != nil {
			return err
		}
		mu.Lock()
		got = append(got, r.Group)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if end != written {
		t.Fatalf("replay ended at %d, want the written end %d", end, written)
	}
	mu.Lock()
	if len(got) != 1 || got[0] != "tail" {
		t.Fatalf("replayed %v, want [tail]", got)
	}
	mu.Unlock()
	s.AdvanceReplicated(written)
	if err := s.WaitFor(context.Background(), Visible, written, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("the system record was handed over again once dispatched: %v", got)
	}
}
