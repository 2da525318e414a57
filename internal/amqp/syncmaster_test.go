package amqp

import (
	"context"
	"errors"
	"net"
	"os"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// syncGroup is a broker (store and AMQP door) as a SYNC_MASTER with one
// slave store, which reaches the master's HA port through link (a relay
// that can stop what the master sends).
type syncGroup struct {
	b      *broker
	master *replication.Master
	slave  *store.Store
	link   *freezer
}

// startSyncGroup starts the group and waits for the slave to be in sync.
// Neither the replication timeout nor the in-sync set's ack timeout
// passes while a test holds the link for a few seconds.
func startSyncGroup(t *testing.T) *syncGroup {
	t.Helper()
	g := &syncGroup{b: &broker{t: t, dir: t.TempDir(), storeCfg: func(c *store.Config) {
		c.ExternalReplication = true
		c.ReplicationTimeout = time.Minute
	}}}
	g.b.start()
	t.Cleanup(g.b.stop)
	m, err := replication.NewMaster(replication.MasterConfig{Store: g.b.st, FS: vfs.OS{}, DataDir: g.b.dir, BrokerName: "broker-a",
		Sync: true, MinInSyncReplicas: 2, AckTimeout: time.Minute, HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	g.master = m
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Serve(ctx, ln); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	g.link = startFreezer(t, ln.Addr().String())

	sdir := t.TempDir()
	scfg := store.DefaultConfig(sdir)
	scfg.FlushDiskType = store.SyncFlush
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.ConsumeQueueSegmentEntries = 1000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 100, 400
	scfg.PrefillBytes = -1
	scfg.Replica = true
	sst, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	g.slave = sst
	t.Cleanup(func() { sst.Close() })
	s, err := replication.NewSlave(replication.SlaveConfig{Store: sst, FS: vfs.OS{}, DataDir: sdir, BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: g.link.ln.Addr().String(), SyncFlush: true, HeartbeatInterval: time.Second, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(context.Background())
	sdone := make(chan struct{})
	go func() { s.Run(sctx); close(sdone) }()
	t.Cleanup(func() { scancel(); <-sdone })
	waitUntil(t, "the slave in sync", func() bool { return m.InSync() == 2 })
	return g
}

// rawConfirms reads publisher confirms until the n publishes from tag
// first on are confirmed, calling at for each confirm frame as it
// arrives; it returns the tags in the order they were confirmed and
// whether each was an ack.
func rawConfirms(t *testing.T, rc *rawConn, first uint64, n int, at func()) ([]uint64, map[uint64]bool) {
	t.Helper()
	var order []uint64
	acked := map[uint64]bool{}
	settle := func(tag uint64, multiple, ok bool) {
		from := tag
		if multiple {
			from = first
		}
		for s := from; s <= tag; s++ {
			if _, done := acked[s]; done {
				if s == tag {
					t.Fatalf("publish %d confirmed twice", tag)
				}
				continue
			}
			acked[s] = ok
			order = append(order, s)
		}
	}
	for len(acked) < n {
		switch m := rc.method().(type) {
		case *wire.BasicAck:
			at()
			settle(m.DeliveryTag, m.Multiple, true)
		case *wire.BasicNack:
			at()
			settle(m.DeliveryTag, m.Multiple, false)
		default:
			t.Fatalf("unexpected %s while waiting for confirms (%d of %d so far)", m.Name(), len(acked), n)
		}
	}
	return order, acked
}

// confirmChannel opens channel 1 of rc in confirm mode.
func confirmChannel(t *testing.T, rc *rawConn) {
	t.Helper()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
	rc.method()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ConfirmSelect{}))
	if m := rc.method(); m.Name() != (&wire.ConfirmSelectOk{}).Name() {
		t.Fatalf("got %s, want confirm.select-ok", m.Name())
	}
}

// publishBurst is n publishes to the default exchange with routing key
// key, bodies body-0, body-1, ..., back to back: sent in one write, they
// are one read burst.
func publishBurst(key, body string, n int) []byte {
	var burst []byte
	for i := range n {
		b := []byte(body + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		burst = wire.AppendMethodFrame(burst, 1, &wire.BasicPublish{RoutingKey: key})
		burst = wire.AppendFrame(burst, wire.FrameHeader, 1, wire.AppendHeader(nil, uint64(len(b)), []byte{0, 0}))
		burst = wire.AppendFrame(burst, wire.FrameBody, 1, b)
	}
	return burst
}

// noFrameFor checks that nothing arrives on rc for d.
func noFrameFor(t *testing.T, rc *rawConn, d time.Duration) {
	t.Helper()
	rc.nc.SetReadDeadline(time.Now().Add(d))
	f, err := rc.fr.ReadFrame(1 << 20)
	if err == nil {
		m, _ := wire.ReadMethod(f.Payload)
		t.Fatalf("a frame (%v) arrived while the slave lacked the burst", m)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v", err)
	}
	rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
}

// TestPublishBurstSyncMaster: under SYNC_MASTER a burst of confirmed
// publishes sent in one write is stored with one append and confirmed
// only once the slave has it: while what the master sends its slave is
// held, the master writes and flushes the burst and confirms none of it;
// once the slave catches up, every publish is acked, each once, in
// publish order, and at the first confirm the slave's log already holds
// the whole burst.
func TestPublishBurstSyncMaster(t *testing.T) {
	g := startSyncGroup(t)
	ch := g.b.channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, g.b)
	rc.open()
	confirmChannel(t, rc)

	const n = 40
	before := g.b.st.Offset(store.Written)
	puts := g.b.st.Stats().Puts
	g.link.frozen.Store(true)
	rc.send(publishBurst("q", "m", n))
	waitUntil(t, "the burst written and flushed on the master", func() bool {
		w := g.b.st.Offset(store.Written)
		return w > before && g.b.st.Offset(store.Flushed) >= w
	})
	end := g.b.st.Offset(store.Written)
	if k := g.b.st.Stats().Puts - puts; k != 1 {
		t.Fatalf("the burst of %d publishes took %d appends, want 1", n, k)
	}
	noFrameFor(t, rc, 500*time.Millisecond)
	if got := g.slave.Offset(store.Written); got >= end {
		t.Fatalf("the slave holds %d of the master's %d while the link is held", got, end)
	}
	if c := g.b.st.Offset(store.Confirmed); c >= end {
		t.Fatalf("the master confirmed %d of %d with its slave behind", c, end)
	}

	g.link.frozen.Store(false)
	order, acked := rawConfirms(t, rc, 1, n, func() {
		if got := g.slave.Offset(store.Flushed); got < end {
			t.Fatalf("a confirm arrived with the slave's log flushed to %d, the burst ends at %d", got, end)
		}
	})
	for i, tag := range order {
		if tag != uint64(i+1) || !acked[tag] {
			t.Fatalf("confirm %d: publish %d (ack %v), want publish %d acked; order %v", i, tag, acked[tag], i+1, order)
		}
	}
	bodies := getAll(t, ch, "q")
	if len(bodies) != n {
		t.Fatalf("queue holds %d messages, want %d", len(bodies), n)
	}
	for i, b := range bodies {
		if want := "m-" + string(rune('a'+i%26)) + string(rune('a'+i/26)); b != want {
			t.Fatalf("message %d is %q, want %q", i, b, want)
		}
	}
}
