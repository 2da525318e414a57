package replication

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// startMasterWith starts a SYNC_MASTER (minInSyncReplicas 1) on its own
// store configuration and master options.
func startMasterWith(t *testing.T, fs vfs.FS, cfg store.Config, mc MasterConfig) *pair {
	t.Helper()
	st := openStore(t, cfg)
	mc.Store, mc.FS, mc.DataDir, mc.BrokerName, mc.Sync, mc.MinInSyncReplicas = st, fs, "/data", "broker-a", true, 1
	mc.AckTimeout, mc.HeartbeatInterval, mc.Logger = time.Second, 50*time.Millisecond, testLogger
	m, err := NewMaster(mc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Serve(ctx, ln); close(done) }()
	p := &pair{master: st, m: m, addr: ln.Addr().String()}
	p.stopMaster = func() { cancel(); <-done; st.Close() }
	return p
}

// TestEmptySlaveStartsAtMastersOldestSegment: a master whose first
// segments retention deleted gets a new, empty slave: the slave's log
// starts at the master's oldest segment, it copies everything from there
// (byte-identical), serves it from queues that start where the master's
// do, and follows new writes.
func TestEmptySlaveStartsAtMastersOldestSegment(t *testing.T) {
	mfs := vfs.NewMem()
	cfg := (*pair)(nil).masterStoreConfig(mfs)
	// Retention deletes what was written before the clock jumps, once.
	var skew atomic.Int64
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	cfg.DeleteWhen = "00;01;02;03;04;05;06;07;08;09;10;11;12;13;14;15;16;17;18;19;20;21;22;23"
	cfg.RetentionCheckInterval = 20 * time.Millisecond
	p := startMasterWith(t, mfs, cfg, MasterConfig{})
	defer p.stopMaster()
	putN(t, p.master, "old", 1000) // ~5 segments of 64 KiB
	skew.Store(int64(cfg.FileReservedTime + time.Hour))
	waitUntil(t, "retention deleted the first segments", func() bool { return p.master.Stats().MinOffset >= 2*p.master.SegmentBytes() })
	first := p.master.Stats().MinOffset

	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	waitUntil(t, "slave caught up", func() bool {
		select {
		case err := <-p.slaveStopped:
			t.Fatalf("slave stopped: %v", err)
		default:
		}
		return p.slave.Offset(store.Flushed) == p.master.Offset(store.Written)
	})
	if got := p.slave.Stats().MinOffset; got != first {
		t.Fatalf("slave's log starts at %d, the master's at %d", got, first)
	}
	comparePrefixFrom(t, p.slave, p.master, first)
	waitUntil(t, "slave queue visible", func() bool { return p.slave.MaxOffset("T", 0) == p.master.MaxOffset("T", 0) })
	if a, b := p.slave.MinOffset("T", 0), p.master.MinOffset("T", 0); a < b {
		t.Fatalf("slave queue starts at %d, the master's at %d", a, b)
	}
	putN(t, p.master, "new", 5)
	waitUntil(t, "slave follows", func() bool { return p.slave.Offset(store.Flushed) == p.master.Offset(store.Written) })
}

// comparePrefixFrom fails unless a and b hold the same bytes from from to
// the shorter's end.
func comparePrefixFrom(t *testing.T, a, b *store.Store, from int64) {
	t.Helper()
	end := min(a.Offset(store.Written), b.Offset(store.Written))
	var ba, bb []byte
	for pos := from; pos < end; {
		ra, na, err1 := a.ReadReplication(pos, end, 64<<10, ba)
		rb, nb, err2 := b.ReadReplication(pos, end, 64<<10, bb)
		if err1 != nil || err2 != nil || na != nb || string(ra) != string(rb) || na == pos {
			t.Fatalf("logs differ at %d: %v %v (ends %d %d)", pos, err1, err2, na, nb)
		}
		pos, ba, bb = na, ra, rb
	}
}

// TestCatchUpIsPaced: a new slave of a master with a backlog copies it
// with at most MaxInFlightBytes unacknowledged on the link (an
// instrumented counter of the master's sender), while producers keep
// sending to the master without a refusal; afterwards the logs are
// byte-identical.
func TestCatchUpIsPaced(t *testing.T) {
	mfs := vfs.NewMem()
	const chunk, window = 8 << 10, 32 << 10
	p := startMasterWith(t, mfs, (*pair)(nil).masterStoreConfig(mfs), MasterConfig{ChunkBytes: chunk, MaxInFlightBytes: window})
	defer p.stopMaster()
	putN(t, p.master, "backlog", 3000) // ~750 KiB: 23 windows
	backlog := p.master.Offset(store.Written)

	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	var wg sync.WaitGroup
	var sendErr error
	var mu sync.Mutex
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				r := p.master.PutMessage(context.Background(), msg("T", fmt.Sprintf("live-%d-%d-%s", w, i, strings.Repeat("x", 200))))
				if !r.OK() {
					mu.Lock()
					sendErr = fmt.Errorf("send %d-%d during catch-up: %v %v", w, i, r.Status, r.Err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	var maxAhead int64
	waitUntil(t, "slave caught up", func() bool {
		maxAhead = max(maxAhead, p.followerMaxAhead(1))
		return p.slave.Offset(store.Flushed) > backlog && p.slave.Offset(store.Flushed) == p.master.Offset(store.Written)
	})
	wg.Wait()
	if sendErr != nil {
		t.Fatal(sendErr)
	}
	waitUntil(t, "slave caught up with the live sends", func() bool {
		maxAhead = max(maxAhead, p.followerMaxAhead(1))
		return p.slave.Offset(store.Flushed) == p.master.Offset(store.Written)
	})
	if maxAhead == 0 || maxAhead > window {
		t.Fatalf("at most %d bytes were in flight to the catching-up slave; the bound is %d", maxAhead, window)
	}
	t.Logf("at most %d bytes in flight (bound %d)", maxAhead, window)
	sameLogs(t, p.slave, p.master)
}

// followerMaxAhead is the most bytes ever in flight to replica id on its
// current connection (0 if it is not connected).
func (p *pair) followerMaxAhead(id int64) int64 {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	for f := range p.m.replicas {
		if f.id == id {
			return f.pace.maxAhead.Load()
		}
	}
	return 0
}

// TestCatchUpRateLimited: with CatchUpBytesPerSecond a slave far behind
// is sent its backlog no faster than that rate (a lower bound on the time
// it takes, which a slow machine only lengthens), and it still ends
// byte-identical.
func TestCatchUpRateLimited(t *testing.T) {
	mfs := vfs.NewMem()
	const chunk, window, rate = 8 << 10, 32 << 10, 2 << 20
	p := startMasterWith(t, mfs, (*pair)(nil).masterStoreConfig(mfs),
		MasterConfig{ChunkBytes: chunk, MaxInFlightBytes: window, CatchUpBytesPerSecond: rate})
	defer p.stopMaster()
	putN(t, p.master, "backlog", 4000) // ~1 MiB
	backlog := p.master.Offset(store.Written)
	start := time.Now()
	p.startSlave(t, vfs.NewMem())
	defer p.stopSlave()
	waitUntil(t, "slave caught up", func() bool { return p.slave.Offset(store.Flushed) == backlog })
	took := time.Since(start)
	if least := time.Duration(float64(backlog-window-chunk) / rate * float64(time.Second)); took < least*9/10 {
		t.Fatalf("caught up %d bytes in %v; at %d B/s it takes at least %v", backlog, took, rate, least)
	}
	sameLogs(t, p.slave, p.master)
}
