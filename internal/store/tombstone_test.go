package store

import (
	"fmt"
	"os"
	"testing"
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
