package core

import (
	"testing"

	"github.com/keelmq/keel/internal/store"
)

// TestTopicDeleteReachesTheSlavesStore: a topic deleted on the master is
// deleted in the slave's store too, as the master's store did it: its
// queues are dropped and its stored records are never served or
// dispatched again, also after the slave loses power and re-dispatches
// its log. The topic created again afterwards keeps its new messages on
// the slave, through the restart's replay of the deletion.
func TestTopicDeleteReachesTheSlavesStore(t *testing.T) {
	p := startCorePair(t)
	defer p.close()
	if _, err := p.master.EnsureTopic("scratch", 2, PermRW); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		put(t, p.master, "scratch", int32(i%2), "old")
	}
	waitFor(t, "the slave holds the messages", func() bool {
		return p.sst.MaxOffset("scratch", 0) == 5 && p.sst.MaxOffset("scratch", 1) == 5
	})
	if err := p.master.DeleteTopic("scratch"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the topic gone from the slave", func() bool { _, ok := p.slave.Topic("scratch"); return !ok })
	// The slave's core forgets the topic as it applies the deletion; its
	// store drops the queues right after.
	waitFor(t, "the deleted topic's queues gone from the slave's store", func() bool {
		return p.sst.MaxOffset("scratch", 0) == 0 && p.sst.MaxOffset("scratch", 1) == 0
	})

	// Created again: only the new incarnation's message is on either.
	if _, err := p.master.EnsureTopic("scratch", 1, PermRW); err != nil {
		t.Fatal(err)
	}
	put(t, p.master, "scratch", 0, "new")
	waitFor(t, "the new message on the slave", func() bool { return p.sst.MaxOffset("scratch", 0) == 1 })
	p.sameTables(t, "recreated")

	// The slave loses power and reopens: recovery re-dispatches its log
	// and the core replays the system records after its snapshot points.
	w := p.sst.Offset(store.Written)
	p.stop[3]() // the slave's replication
	p.stop[2]() // its store
	p.stop = p.stop[:2]
	p.slaveFS.Crash()
	scfg := pairStoreConfig(p.slaveFS)
	scfg.Replica = true
	sst, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer sst.Close()
	if sst.Offset(store.Written) < w {
		t.Fatalf("the slave lost flushed bytes: %d < %d", sst.Offset(store.Written), w)
	}
	sst.AdvanceReplicated(w) // what the master confirmed before
	if _, err := New(coreConfig(p.slaveFS, true), sst, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slave's dispatch after the restart", func() bool { return sst.VisibleOffset() >= w })
	if n := sst.MaxOffset("scratch", 1); n != 0 {
		t.Fatalf("after the restart the deleted topic's queue 1 holds %d entries", n)
	}
	r, err := sst.GetMessage("scratch", 0, 0, 32, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if len(r.Records) != 1 || sst.MaxOffset("scratch", 0) != 1 {
		t.Fatalf("after the restart the slave serves %d records of scratch (max offset %d), want the new one",
			len(r.Records), sst.MaxOffset("scratch", 0))
	}
}
