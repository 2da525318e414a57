package replication

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestStateOfALaggingReplica: an ASYNC_MASTER's view of a replica whose
// disk stalls (it writes but cannot flush, so its SYNC_FLUSH acks stop):
// its acked offset, lag in bytes and in time (the age of the first record
// it lacks, on the master's store clock), last ack; the slave's own view;
// and the runtime-info entries built from both.
func TestStateOfALaggingReplica(t *testing.T) {
	const t0 = 1_700_000_000_000 // the master's store clock, Unix ms
	mcfg := storeConfig(vfs.NewMem())
	var clock atomic.Int64
	mcfg.Now = func() time.Time { return time.UnixMilli(clock.Load()) }
	master := openStore(t, mcfg)
	defer master.Close()
	m, err := NewMaster(MasterConfig{Store: master, FS: vfs.NewMem(), DataDir: "/data", BrokerName: "broker-a",
		HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { m.Serve(ctx, ln); close(served) }()
	defer func() { cancel(); <-served }()

	efs := vfs.NewErrorFS(vfs.NewMem())
	scfg := storeConfig(efs)
	scfg.Replica = true
	slave := openStore(t, scfg)
	stall := make(chan struct{})
	defer func() { close(stall); slave.Close() }()
	s, err := NewSlave(SlaveConfig{Store: slave, FS: efs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 3,
		MasterAddr: ln.Addr().String(), SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(sctx) }()
	defer func() { scancel(); <-stopped }()

	for i := range 3 {
		clock.Store(t0 + int64(i)*1000)
		if r := master.PutMessage(context.Background(), msg("T", "replicated")); !r.OK() {
			t.Fatalf("put: %v %v", r.Status, r.Err)
		}
	}
	held := master.Offset(store.Written)
	waitUntil(t, "the replica to acknowledge", func() bool {
		st := m.State(time.Now())
		return len(st.Replicas) == 1 && st.Replicas[0].Acked == held
	})
	if st := m.State(time.UnixMilli(t0 + 60_000)); st.Replicas[0].Lag != 0 || st.Replicas[0].LagBytes != 0 {
		t.Fatalf("caught-up replica: %+v", st.Replicas[0])
	}

	// Its disk stalls: it still writes what it receives, but its flushed
	// offset, which its acks carry, stops.
	efs.Inject(vfs.Rule{Ops: vfs.OpSync, Path: "commitlog", Stall: stall})
	for i := range 2 {
		clock.Store(t0 + 10_000 + int64(i)*1000)
		if r := master.PutMessage(context.Background(), msg("T", "not on the replica's disk")); !r.OK() {
			t.Fatalf("put: %v %v", r.Status, r.Err)
		}
	}
	end := master.Offset(store.Written)
	waitUntil(t, "the replica to write the new records", func() bool { return slave.Offset(store.Written) == end })
	waitUntil(t, "an ack after the stall", func() bool {
		return m.State(time.Now()).Replicas[0].LastAck.After(time.Now().Add(-100 * time.Millisecond))
	})

	st := m.State(time.UnixMilli(t0 + 17_500))
	if st.Role != RoleAsyncMaster || st.BrokerName != "broker-a" || st.Epoch != 1 || st.LogEnd != end || st.InSyncReplicas != 2 {
		t.Fatalf("master state %+v", st)
	}
	r := st.Replicas[0]
	if r.BrokerID != 3 || r.Acked != held || r.LagBytes != end-held || r.Lag != 7500*time.Millisecond || r.LastAck.IsZero() || r.Addr == "" {
		t.Fatalf("lagging replica %+v (held %d, end %d)", r, held, end)
	}
	info := st.RuntimeInfo()
	for k, want := range map[string]string{
		"keelReplicationRole": "ASYNC_MASTER", "keelReplicationEpoch": "1", "keelReplicationReplicas": "3",
		"keelReplicationReplica3LagSeconds": "7.500", "keelReplicationReplica3InSync": "true",
		"keelReplicationInSyncReplicas": "2", "keelReplicationWrittenOffset": itoa(end),
		"keelReplicationReplica3AckedOffset": itoa(held), "keelReplicationReplica3LagBytes": itoa(end - held),
	} {
		if info[k] != want {
			t.Errorf("runtime info %s = %q, want %q", k, info[k], want)
		}
	}
	if info["keelReplicationReplica3LastAckTimestamp"] == "0" {
		t.Errorf("no last ack time: %v", info)
	}

	waitUntil(t, "the master's confirmed offset on the slave", func() bool { return s.State().Confirmed == master.Offset(store.Confirmed) })
	ss := s.State()
	if ss.Role != RoleSlave || !ss.Connected || ss.BrokerID != 3 || ss.Epoch != 1 || ss.LogEnd != end ||
		ss.LastContact.IsZero() || ss.MasterAddr != ln.Addr().String() {
		t.Fatalf("slave state %+v", ss)
	}
	if si := ss.RuntimeInfo(); si["keelReplicationRole"] != "SLAVE" || si["keelReplicationConnected"] != "true" ||
		si["keelReplicationInSyncReplicas"] != "" {
		t.Fatalf("slave runtime info %v", si)
	}

	// The master goes away: the slave says it is not connected.
	cancel()
	<-served
	waitUntil(t, "the slave to notice", func() bool { return !s.State().Connected })
}

// TestStateInSyncShort: a SYNC_MASTER with fewer copies in sync than
// minInSyncReplicas says so.
func TestStateInSyncShort(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 2)
	defer p.stopMaster()
	st := p.m.State(time.Now())
	if st.Role != RoleSyncMaster || !st.InSyncShort() || st.InSyncReplicas != 1 || st.MinInSyncReplicas != 2 || len(st.Replicas) != 0 {
		t.Fatalf("state %+v", st)
	}
	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	waitUntil(t, "slave in sync", func() bool { return !p.m.State(time.Now()).InSyncShort() })
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// TestIdleReplicaStaysConnected: with nothing to replicate, the replica
// answers the master's heartbeats, so the master's ack reader does not
// time out: the same connection stays, in sync, with recent acks (before,
// an idle replica was dropped and reconnected every six heartbeats, and a
// SYNC_MASTER refused sends in between).
func TestIdleReplicaStaysConnected(t *testing.T) {
	p := startMaster(t, vfs.NewMem(), 2)
	defer p.stopMaster()
	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	waitUntil(t, "connected", func() bool { return len(p.m.State(time.Now()).Replicas) == 1 })
	first := p.m.State(time.Now()).Replicas[0]
	deadline := time.Now().Add(20 * 50 * time.Millisecond) // twenty heartbeats, over three idle timeouts
	for time.Now().Before(deadline) {
		st := p.m.State(time.Now())
		if len(st.Replicas) != 1 || st.Replicas[0].Addr != first.Addr || !st.Replicas[0].InSync {
			t.Fatalf("the idle replica's connection did not stay: first %+v, now %+v", first, st.Replicas)
		}
		if r := p.m.CheckSend(); !r.OK() {
			t.Fatalf("send refused with an idle replica in sync: %v", r.Err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if r := p.m.State(time.Now()).Replicas[0]; time.Since(r.LastAck) > 500*time.Millisecond {
		t.Fatalf("no recent ack from the idle replica: %+v", r)
	}
}

// slowWriteListener's connections return from Write a while after the
// bytes went out, as a loaded machine may schedule the writer late.
type slowWriteListener struct{ net.Listener }

func (l slowWriteListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return slowWriteConn{c}, nil
}

type slowWriteConn struct{ net.Conn }

func (c slowWriteConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	time.Sleep(20 * time.Millisecond)
	return n, err
}

// TestAckBeforeWriteReturns: a replica may acknowledge a range before the
// master's Write of it has returned; the master must count the range as
// sent by then, not drop the replica for acknowledging "bytes it was never
// sent" (under load, that closed the connection several times a second and
// a SYNC_MASTER refused sends while the replica reconnected).
func TestAckBeforeWriteReturns(t *testing.T) {
	fs := vfs.NewMem()
	cfg := storeConfig(fs)
	cfg.ExternalReplication = true
	cfg.ReplicationTimeout = 2 * time.Second
	st := openStore(t, cfg)
	defer st.Close()
	m, err := NewMaster(MasterConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", Sync: true,
		MinInSyncReplicas: 2, AckTimeout: 2 * time.Second, HeartbeatInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { m.Serve(ctx, slowWriteListener{ln}); close(served) }()
	defer func() { cancel(); <-served }()
	p := &pair{master: st, m: m, addr: ln.Addr().String()}
	p.startSlave(t, vfs.NewMem())
	defer func() { p.stopSlave(); p.slave.Close() }()
	waitUntil(t, "slave in sync", func() bool { return m.InSync() == 2 })
	first := m.State(time.Now()).Replicas[0].Addr
	for i := range 20 {
		if r := st.PutMessage(context.Background(), msg("T", fmt.Sprint("m", i))); !r.OK() {
			t.Fatalf("put %d: %v %v", i, r.Status, r.Err)
		}
	}
	if st := m.State(time.Now()); len(st.Replicas) != 1 || st.Replicas[0].Addr != first {
		t.Fatalf("the replica was dropped: first %s, now %+v", first, st.Replicas)
	}
}
