package replication

import (
	"context"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker/schedule"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestScheduledDeliveryHeldWhileTooFewInSync: the broker's own writes on a
// SYNC_MASTER (here the schedule engine's delivery of a due message) are
// refused at once while too few copies are in sync — nothing is written,
// so no put waits out the replication timeout and no retry writes a
// second copy — and the delivery happens, once, when the slave is back.
func TestScheduledDeliveryHeldWhileTooFewInSync(t *testing.T) {
	mfs := vfs.NewMem()
	p := startMaster(t, mfs, 2)
	defer p.stopMaster()
	p.startSlave(t, vfs.NewMem())
	waitUntil(t, "slave in sync", func() bool { return p.m.InSync() == 2 })
	const delay = 500 * time.Millisecond
	svc, err := schedule.New(schedule.Config{Dir: "/data", FS: mfs, DelayLevels: []time.Duration{delay},
		RetryInterval: 20 * time.Millisecond}, p.master)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- svc.Run(ctx) }()
	defer func() { cancel(); <-ran; svc.Close() }()
	p.master.OnVisible(svc.OnDispatch)

	if r := svc.Schedule(context.Background(), msg("T", "later"), 1, 0); !r.OK() {
		t.Fatalf("schedule: %v %v", r.Status, r.Err)
	}
	scheduledAt := time.Now()
	p.stopSlave()
	waitUntil(t, "slave out of the in-sync set", func() bool { return p.m.InSync() == 1 })
	if time.Since(scheduledAt) > delay/2 {
		t.Skip("the machine is too slow to stop the slave before the delivery is due")
	}
	w := p.master.Offset(store.Written)
	// Past the due time, with retries every 20 ms: nothing is written.
	time.Sleep(delay + 300*time.Millisecond)
	if got := p.master.Offset(store.Written); got != w {
		t.Fatalf("the master wrote %d bytes while too few copies were in sync", got-w)
	}
	if n := p.master.MaxOffset("T", 0); n != 0 {
		t.Fatalf("delivered %d messages without the slave", n)
	}

	s, err := NewSlave(SlaveConfig{Store: p.slave, FS: p.slaveFS, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(sctx) }()
	defer func() { scancel(); <-stopped; p.slave.Close() }()
	waitUntil(t, "the delivery after the slave returned", func() bool { return p.master.MaxOffset("T", 0) == 1 })
	waitUntil(t, "the slave holds it", func() bool { return p.slave.Offset(store.Flushed) == p.master.Offset(store.Written) })
	if n := p.master.MaxOffset("T", 0); n != 1 {
		t.Fatalf("%d deliveries of one scheduled message", n)
	}
	r, err := p.master.GetMessage("T", 0, 0, 1, 1<<20, nil)
	if err != nil || len(r.Records) != 1 || string(message.View(r.Records[0]).Body()) != "later" {
		t.Fatalf("delivered %v %v", r, err)
	}
	r.Release()
}
