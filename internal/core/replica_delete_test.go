package core

import (
	"errors"
	"testing"
)

// TestSlaveRefusesTopicDeletion: a topic deletion asked of a slave (an
// admin tool or a Kafka client pointed at it) is refused and changes
// nothing: the slave keeps its copy of the topic's messages and config,
// and goes on taking the master's.
func TestSlaveRefusesTopicDeletion(t *testing.T) {
	p := startCorePair(t)
	defer p.close()
	if _, err := p.master.EnsureTopic("kept", 1, PermRW); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		put(t, p.master, "kept", 0, "")
	}
	waitFor(t, "the slave holds the messages", func() bool {
		_, ok := p.slave.Topic("kept")
		return ok && p.sst.MaxOffset("kept", 0) == 3
	})
	if err := p.slave.DeleteTopic("kept"); !errors.Is(err, ErrForbidden) {
		t.Fatalf("delete on the slave: %v, want ErrForbidden", err)
	}
	if _, ok := p.slave.Topic("kept"); !ok {
		t.Fatal("the refused deletion removed the slave's topic config")
	}
	if n := p.sst.MaxOffset("kept", 0); n != 3 {
		t.Fatalf("after the refused deletion the slave's queue holds %d entries, want 3", n)
	}
	put(t, p.master, "kept", 0, "")
	waitFor(t, "the next message on the slave", func() bool { return p.sst.MaxOffset("kept", 0) == 4 })
	p.sameTables(t, "after the refused deletion")
	if err := p.sst.DeleteTopic("kept"); err == nil {
		t.Fatal("the replica's store deleted a topic")
	}
	if n := p.sst.MaxOffset("kept", 0); n != 4 {
		t.Fatalf("the replica's store refused the deletion but holds %d entries, want 4", n)
	}
}
