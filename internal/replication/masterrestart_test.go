package replication

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestRestartedMasterHidesTailUntilTheSlaveHasIt: a SYNC_MASTER that
// restarts with a record written but never replicated does not let a
// consumer read it (no slave holds it; the master's machine could still
// be lost) until the slave has caught up with it; then it is served.
func TestRestartedMasterHidesTailUntilTheSlaveHasIt(t *testing.T) {
	mfs, sfs := vfs.NewMem(), vfs.NewMem()
	p := startMaster(t, mfs, 2)
	p.startSlave(t, sfs)
	waitUntil(t, "slave in sync", func() bool { return p.m.InSync() == 2 })
	if r := p.master.PutMessage(context.Background(), msg("T", "replicated")); r.Status != store.PutOK {
		t.Fatalf("put: %v %v", r.Status, r.Err)
	}
	p.stopSlave()
	if err := p.slave.Close(); err != nil {
		t.Fatal(err)
	}
	p.stopMaster()

	// The master's store writes a record while no slave is there: it is
	// never replicated, and the put is not acknowledged.
	st := openStore(t, p.masterStoreConfig(mfs))
	if r := st.PutMessage(context.Background(), msg("T", "tail")); r.Status == store.PutOK {
		t.Fatalf("an unreplicated put was acknowledged")
	}
	written := st.Offset(store.Written)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	p = startMaster(t, mfs, 2)
	defer p.stopMaster()
	if n := p.master.MaxOffset("T", 0); n != 1 {
		t.Fatalf("the restarted master shows %d messages, want the replicated one only", n)
	}
	r, err := p.master.GetMessage("T", 0, 1, 10, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status == store.Found {
		t.Fatalf("a consumer read the unreplicated record on the restarted master")
	}
	r.Release()

	p.startSlave(t, sfs)
	defer func() { p.stopSlave(); p.slave.Close() }()
	waitUntil(t, "the tail shown once replicated", func() bool { return p.master.MaxOffset("T", 0) == 2 })
	if f := p.slave.Offset(store.Flushed); f < written {
		t.Fatalf("the master shows its tail (to %d) while the slave flushed only %d", written, f)
	}
	r, err = p.master.GetMessage("T", 0, 1, 10, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if r.Status != store.Found || len(r.Records) != 1 || string(message.View(r.Records[0]).Body()) != "tail" {
		t.Fatalf("read after replication: %v", r.Status)
	}
}
