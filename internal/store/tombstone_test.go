package store

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/vfs"
)

// After an ordinary topic deletion Check reports nothing (it used to report
// every record of the topic as missing its queue entry), also after a
// restart, and no empty queue directory is left. A re-created topic starts
// at queue offset 0 again and checks clean too.
func TestCheckAfterTopicDelete(t *testing.T) {
	fx := newCorruptFixture(t, true)
	s := mustOpen(t, fx.cfg)
	for i := range 3 {
		put(t, s, newMsg("NcTopic", 0, fmt.Sprint("nc-", i), nil))
	}
	put(t, s, newMsg("NcTopic", 1, "nc-q1", nil))
	waitVisible(t, s, "NcTopic", 0, 3)
	if err := s.DeleteTopic("NcTopic"); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.fs.Stat("/data/consumequeue/NcTopic"); !os.IsNotExist(err) {
		t.Fatalf("the deleted topic's queue directory is left: %v", err)
	}
	s.Close()
	checkClean := func(what string, deleted int64) {
		t.Helper()
		rep, err := Check(fx.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() || len(rep.Warnings) != 0 || rep.DeletedTopicRecords != deleted {
			t.Fatalf("%s: problems %v warnings %v, %d records of deleted topics (want %d)", what, rep.Problems, rep.Warnings, rep.DeletedTopicRecords, deleted)
		}
	}
	checkClean("after the deletion", 4)

	s = mustOpen(t, fx.cfg)
	if n := s.MaxOffset("NcTopic", 0); n != 0 {
		t.Fatalf("restart re-dispatched the deleted topic: max offset %d", n)
	}
	m := newMsg("NcTopic", 0, "again", nil)
	put(t, s, m)
	if m.QueueOffset != 0 {
		t.Fatalf("re-created topic starts at queue offset %d", m.QueueOffset)
	}
	waitVisible(t, s, "NcTopic", 0, 1)
	s.Close()
	checkClean("after re-creating the topic", 4)
	checkAcked(t, mustOpenClose(t, fx.cfg), fx.msgs, "other topics")
}

// A crash after the deletion but before the checkpoint moved past the
// topic's records does not bring its queues back: re-dispatch honours the
// tombstone.
func TestTopicDeleteSurvivesRedispatch(t *testing.T) {
	fx := newCorruptFixture(t, true)
	s := mustOpen(t, fx.cfg)
	for i := range 3 {
		put(t, s, newMsg("NcTopic", 0, fmt.Sprint("nc-", i), nil))
	}
	waitVisible(t, s, "NcTopic", 0, 3)
	if err := s.DeleteTopic("NcTopic"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Re-dispatch everything, as after a crash with an old checkpoint.
	fx.fs.Remove("/data/checkpoint")
	s = mustOpen(t, fx.cfg)
	if n := s.MaxOffset("NcTopic", 0); n != 0 {
		t.Fatalf("re-dispatch resurrected the deleted topic: max offset %d", n)
	}
	s.Close()
	if _, err := fx.fs.Stat("/data/consumequeue/NcTopic"); !os.IsNotExist(err) {
		t.Fatalf("re-dispatch created the deleted topic's queue directory: %v", err)
	}
}

// mustOpenClose opens the store for reads by the caller and closes it at
// the end of the test.
func mustOpenClose(t *testing.T, cfg Config) *Store {
	s := mustOpen(t, cfg)
	t.Cleanup(func() { s.Close() })
	return s
}

// On a synchronous master (ExternalReplication) records of a topic that
// are written but not yet replicated when the topic is deleted are not
// dispatched yet: the tombstone must cover them (it used to stop at
// Visible), or once replicated they are dispatched into the queues of the
// deleted topic, there for a topic created again with the name to serve.
func TestTopicDeleteCoversUnreplicatedRecords(t *testing.T) {
	fs := vfs.NewMem()
	cfg := testConfig(fs)
	cfg.FlushDiskType = SyncFlush
	cfg.ExternalReplication = true
	s := mustOpen(t, cfg)
	defer func() { s.Close() }()
	acks := make(chan PutResult, 3)
	var ends []int64
	for i := range 3 {
		m := newMsg("Unrepl", 0, fmt.Sprint("old-", i), nil)
		if r, pending := s.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r PutResult) { acks <- r }); !pending {
			t.Fatalf("put %d not pending: %v", i, r)
		}
		ends = append(ends, m.PhysOffset+int64(m.StoredSize())+4) // the CRC after the record
	}
	// The first record is replicated (and dispatched), the other two not.
	s.AdvanceReplicated(ends[0])
	if r := <-acks; r.Status != PutOK {
		t.Fatalf("first ack: %v", r)
	}
	waitVisible(t, s, "Unrepl", 0, 1)
	if err := s.DeleteTopic("Unrepl"); err != nil {
		t.Fatal(err)
	}
	if v, w := s.VisibleOffset(), s.Offset(Written); v >= w {
		t.Fatalf("the test needs records written but not visible at the deletion: visible %d, written %d", v, w)
	}
	// Now the slaves have everything.
	s.AdvanceReplicated(ends[2])
	for range 2 {
		if r := <-acks; r.Status != PutOK {
			t.Fatalf("ack: %v", r)
		}
	}
	if err := s.WaitFor(context.Background(), Visible, ends[2], 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := s.MaxOffset("Unrepl", 0); n != 0 {
		t.Fatalf("records of the deleted topic were dispatched after the deletion: max offset %d", n)
	}

	// Created again: the new topic holds its own message only.
	m := newMsg("Unrepl", 0, "new", nil)
	if r, pending := s.PutMessagesDeferred(context.Background(), []*message.Message{m}, func(r PutResult) { acks <- r }); !pending {
		t.Fatalf("put not pending: %v", r)
	}
	end := m.PhysOffset + int64(m.StoredSize()) + 4
	s.AdvanceReplicated(end)
	if r := <-acks; r.Status != PutOK {
		t.Fatalf("ack of the new message: %v", r)
	}
	if err := s.WaitFor(context.Background(), Visible, end, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Fatalf("store failed: %v", err)
	}
	check := func(s *Store, what string) {
		t.Helper()
		r, err := s.GetMessage("Unrepl", 0, 0, 32, 1<<20, nil)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		defer r.Release()
		if got := bodies(r); len(got) != 1 || got[0] != "new" || s.MaxOffset("Unrepl", 0) != 1 {
			t.Fatalf("%s: the re-created topic serves %q (max offset %d), want only the new message", what, got, s.MaxOffset("Unrepl", 0))
		}
	}
	check(s, "after re-creating")

	// A restart re-dispatching the whole log agrees, and Check is clean.
	s.Close()
	fs.Remove("/data/checkpoint")
	s = mustOpen(t, cfg)
	s.AdvanceReplicated(end)
	if err := s.WaitFor(context.Background(), Visible, end, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	check(s, "after re-dispatch")
	s.Close()
	rep, err := Check(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.DeletedTopicRecords != 3 {
		t.Fatalf("check: problems %v warnings %v, %d records of deleted topics (want 3)", rep.Problems, rep.Warnings, rep.DeletedTopicRecords)
	}
}
