package replication

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// sendResult is one send on a SYNC_MASTER as the broker makes it: the
// in-sync check, then the put.
func (p *pair) send(t *testing.T, body string) store.PutStatus {
	t.Helper()
	if r := p.m.CheckSend(); !r.OK() {
		return r.Status
	}
	m := msg("T", body)
	r := p.master.PutMessage(context.Background(), m)
	if r.OK() {
		// SEND_OK only for what the slave has on its disk.
		end := m.PhysOffset + int64(m.StoredSize()) + 4
		if f := p.slave.Offset(store.Flushed); f < end {
			t.Fatalf("%s acknowledged at %d, the slave flushed only %d", body, end, f)
		}
	}
	return r.Status
}

// sendFor sends for d and counts the outcomes.
func (p *pair) sendFor(t *testing.T, phase string, d time.Duration) map[store.PutStatus]int {
	got := map[store.PutStatus]int{}
	for i, end := 0, time.Now().Add(d); time.Now().Before(end); i++ {
		got[p.send(t, fmt.Sprintf("%s-%d", phase, i))]++
	}
	return got
}

// healed waits until sends are acknowledged again and the slave holds the
// master's log, byte-identical.
func (p *pair) healed(t *testing.T, phase string) {
	t.Helper()
	waitUntil(t, phase+": SEND_OK again", func() bool { return p.send(t, phase+"-healed") == store.PutOK })
	waitUntil(t, phase+": slave caught up", func() bool { return p.slave.Offset(store.Flushed) == p.master.Offset(store.Written) })
	sameLogs(t, p.slave, p.master)
}

// TestLinkFaults: a SYNC_MASTER and its slave through a proxy that drops
// the connections, stalls the link, slows it, cuts only the slave's
// acknowledgements, and flips a byte of the stream. Throughout, a send is
// answered SEND_OK only when the slave has it on its disk; a broken link
// gets FLUSH_SLAVE_TIMEOUT or a refusal, never SEND_OK; a flipped byte is
// never stored; after each fault sends are acknowledged again and the
// two logs are byte-identical.
func TestLinkFaults(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 2)
	defer p.stopMaster()
	proxy := newLinkProxy(t, p.addr)
	master := p.addr
	p.addr = proxy.addr()
	p.startSlave(t, vfs.NewMem())
	defer func() { p.stopSlave(); p.slave.Close() }()
	p.addr = master
	p.healed(t, "start")

	broken := func(got map[store.PutStatus]int) bool {
		return got[store.PutFlushSlaveTimeout]+got[store.PutInSyncReplicasNotEnough] > 0
	}
	t.Run("drop", func(t *testing.T) {
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(30 * time.Millisecond):
					proxy.drop()
				}
			}
		}()
		got := p.sendFor(t, "drop", time.Second)
		close(stop)
		t.Logf("drop: %v", got)
		p.healed(t, "drop")
	})
	t.Run("stall", func(t *testing.T) {
		proxy.stall.Store(true)
		got := p.sendFor(t, "stall", 2*time.Second)
		proxy.heal()
		if got[store.PutOK] > 1 || !broken(got) || got[store.PutInSyncReplicasNotEnough] == 0 {
			// One send may complete as the stall begins.
			t.Fatalf("stalled link: %v", got)
		}
		p.healed(t, "stall")
	})
	t.Run("slow", func(t *testing.T) {
		proxy.delay.Store(int64(5 * time.Millisecond))
		got := p.sendFor(t, "slow", time.Second)
		proxy.heal()
		if got[store.PutOK] == 0 {
			t.Fatalf("slow link: %v", got)
		}
		p.healed(t, "slow")
	})
	t.Run("cut acks", func(t *testing.T) {
		proxy.cutAcks.Store(true)
		got := p.sendFor(t, "cut", 2*time.Second)
		proxy.heal()
		if got[store.PutOK] > 1 || !broken(got) || got[store.PutInSyncReplicasNotEnough] == 0 {
			t.Fatalf("acks cut: %v", got)
		}
		p.healed(t, "cut acks")
	})
	t.Run("flipped byte", func(t *testing.T) {
		proxy.flip.Store(true)
		got := p.sendFor(t, "flip", 500*time.Millisecond)
		if proxy.flip.Load() {
			t.Fatalf("no byte was flipped: %v", got)
		}
		p.healed(t, "flipped byte") // byte-identical: the flipped frame was refused
	})
}

// TestSlaveDiskFullNeverAcked: while the slave's disk is full a
// SYNC_MASTER acknowledges nothing (FLUSH_SLAVE_TIMEOUT, then refusals
// once the slave leaves the in-sync set); when space returns the slave
// catches up by itself and sends are acknowledged again, with nothing
// lost: the logs are byte-identical.
func TestSlaveDiskFullNeverAcked(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 2)
	defer p.stopMaster()
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	p.slaveFS = mem
	p.slaveCfg = storeConfig(efs)
	p.slaveCfg.Replica = true
	p.slave = openStore(t, p.slaveCfg)
	defer p.slave.Close()
	s, err := NewSlave(SlaveConfig{Store: p.slave, FS: efs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	p.healed(t, "start")

	rule := efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "/data/commitlog/", Err: syscall.ENOSPC})
	got := p.sendFor(t, "full", 2*time.Second)
	if got[store.PutOK] > 0 || got[store.PutInSyncReplicasNotEnough] == 0 {
		t.Fatalf("slave disk full: %v", got)
	}
	efs.RemoveRule(rule)
	p.healed(t, "space back")
	select {
	case err := <-stopped:
		t.Fatalf("slave stopped: %v", err)
	default:
	}
	if err := p.slave.Err(); err != nil {
		t.Fatalf("slave store failed: %v", err)
	}
}
