package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

func TestTruncationPoint(t *testing.T) {
	master := History{{1, 0}, {2, 1000}, {4, 5000}}
	tests := []struct {
		name    string
		replica History
		end     int64
		want    int64
		ok      bool
	}{
		{"empty replica", nil, 0, 0, true},
		{"prefix", History{{1, 0}, {2, 1000}}, 3000, 3000, true},
		{"first epoch longer than the master's", History{{1, 0}}, 1200, 1000, true},
		{"epoch the master never had", History{{1, 0}, {3, 1000}}, 2000, 1000, true},
		// KIP-279: two failovers; the replica's newest common epoch is 2,
		// which ends at 4000 here (its epoch 3) and 5000 on the master.
		{"double failover", History{{1, 0}, {2, 1000}, {3, 4000}}, 4500, 4000, true},
		{"same epoch other start", History{{1, 0}, {2, 900}}, 950, 900, true},
		{"past the master's end", History{{1, 0}, {2, 1000}, {4, 5000}}, 6500, 6000, true},
		{"epoch recorded ahead of its bytes", History{{1, 0}, {3, 2000}}, 900, 900, true},
		{"nothing in common", History{{7, 0}}, 10, 0, false},
		{"bytes without history", nil, 10, 0, false},
	}
	for _, tc := range tests {
		got, ok := TruncationPoint(tc.replica, tc.end, master, 6000)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: TruncationPoint = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestTrimHistory(t *testing.T) {
	h := History{{1, 0}, {2, 100}, {3, 300}}
	for _, tc := range []struct {
		end  int64
		want int
	}{{400, 3}, {300, 2}, {200, 2}, {100, 1}, {0, 0}} {
		if got := trimHistory(h, tc.end); len(got) != tc.want {
			t.Errorf("trim at %d: %v", tc.end, got)
		}
	}
}

// sameLogs fails unless the two stores' CommitLogs hold the same bytes up
// to the shorter's end, and returns that end.
func sameLogs(t *testing.T, a, b *store.Store) int64 {
	t.Helper()
	end := min(a.Offset(store.Written), b.Offset(store.Written))
	var ba, bb []byte
	for pos := int64(0); pos < end; {
		ra, na, err := a.ReadReplication(pos, end, 64<<10, ba)
		if err != nil {
			t.Fatalf("read at %d: %v", pos, err)
		}
		rb, nb, err := b.ReadReplication(pos, end, 64<<10, bb)
		if err != nil {
			t.Fatalf("read at %d: %v", pos, err)
		}
		if na != nb || !bytes.Equal(ra, rb) {
			t.Fatalf("logs differ in the range at %d (ends %d and %d)", pos, na, nb)
		}
		if na == pos {
			t.Fatalf("no progress at %d", pos)
		}
		pos, ba, bb = na, ra, rb
	}
	return end
}

func putN(t *testing.T, st *store.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		if r := st.PutMessage(context.Background(), msg("T", fmt.Sprintf("%s-%d-%0200d", prefix, i, i))); !r.OK() {
			t.Fatalf("put %s-%d: %v %v", prefix, i, r.Status, r.Err)
		}
	}
}

// TestSlaveTruncatesTailTheMasterLost: a SYNC_MASTER streams before its
// own fdatasync, so its slave can hold bytes the master loses in a power
// loss (its disk stuck, nothing acknowledged). The restarted master starts
// a new epoch at its shorter end; the slave truncates the lost tail
// durably, takes the new epoch, and the two logs are byte-identical; the
// slave never showed the lost messages, and after its own power loss the
// truncated tail does not come back.
func TestSlaveTruncatesTailTheMasterLost(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	p := startMaster(t, efs, 1)
	p.startSlave(t, vfs.NewMem())
	putN(t, p.master, "acked", 10)
	confirmed := p.master.Offset(store.Confirmed)
	waitUntil(t, "slave shows the acknowledged messages", func() bool { return p.slave.MaxOffset("T", 0) == 10 })

	// The master's disk sticks: what it writes reaches the slave, never
	// its own disk, and nothing is acknowledged.
	stall := make(chan struct{})
	efs.Inject(vfs.Rule{Ops: vfs.OpSync, Path: "/data/commitlog/", Stall: stall})
	for i := range 10 {
		if r := p.master.PutMessage(context.Background(), msg("T", fmt.Sprint("lost-", i))); r.OK() {
			t.Fatalf("put with the master's disk stuck: %v", r.Status)
		}
	}
	lostEnd := p.master.Offset(store.Written)
	waitUntil(t, "slave holds the unflushed tail", func() bool { return p.slave.Offset(store.Flushed) == lostEnd })
	if v := p.slave.VisibleOffset(); v > confirmed {
		t.Fatalf("slave shows %d, the master confirmed %d", v, confirmed)
	}

	// Power loss on the master; it restarts from what its disk kept.
	crashed := mem.CrashClone()
	p.stopSlave()
	close(stall)
	p.stopMaster()
	p2 := startMaster(t, crashed, 1)
	defer p2.stopMaster()
	if e := p2.master.Offset(store.Written); e >= lostEnd {
		t.Fatalf("setup: the restarted master holds %d, the lost tail ended at %d", e, lostEnd)
	}
	putN(t, p2.master, "new", 5)

	s, err := NewSlave(SlaveConfig{Store: p.slave, FS: p.slaveFS, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p2.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	waitUntil(t, "slave caught up with the new master", func() bool {
		select {
		case err := <-stopped:
			t.Fatalf("slave stopped: %v", err)
		default:
		}
		return p.slave.Offset(store.Flushed) == p2.master.Offset(store.Written)
	})
	if n := s.Truncations(); n != 1 {
		t.Fatalf("%d truncations", n)
	}
	sameLogs(t, p.slave, p2.master)
	if h, mh := s.History(), p2.m.History(); len(h) != 2 || h[1] != mh.Last() {
		t.Fatalf("slave epochs %v, master %v", h, mh)
	}
	waitUntil(t, "slave shows the new messages", func() bool { return p.slave.MaxOffset("T", 0) == 15 })
	got, err := p.slave.GetMessage("T", 0, 10, 5, 1<<20, nil)
	if err != nil || len(got.Records) != 5 {
		t.Fatalf("get from slave: %v %v", got, err)
	}
	for _, rec := range got.Records {
		if b := string(message.View(rec).Body()); !strings.HasPrefix(b, "new-") {
			t.Fatalf("slave serves %q after the truncation", b)
		}
	}
	cancel()
	<-stopped

	// The slave's power loss: the truncated tail stays gone.
	end := p.slave.Offset(store.Written)
	p.slaveFS.Crash()
	p.slave.Close()
	after := openStore(t, p.slaveCfg)
	defer after.Close()
	if w := after.Offset(store.Written); w != end {
		t.Fatalf("after power loss the slave ends at %d, was %d", w, end)
	}
	sameLogs(t, after, p2.master)
}

// TestSlaveKeepsWhatItShowed: a master that comes back without bytes it
// had confirmed (here: restarted from a copy of its disk taken earlier, as
// a master over ASYNC_FLUSH after a power loss) would have its slave
// truncate records the slave already showed; the slave refuses, stops
// with ErrDiverged and keeps every byte.
func TestSlaveKeepsWhatItShowed(t *testing.T) {
	mfs := vfs.NewMem()
	p := startMaster(t, mfs, 1)
	p.startSlave(t, vfs.NewMem())
	putN(t, p.master, "a", 10)
	earlier := mfs.CrashClone()
	putN(t, p.master, "b", 10)
	end := p.master.Offset(store.Written)
	waitUntil(t, "slave shows all 20", func() bool { return p.slave.MaxOffset("T", 0) == 20 })
	p.stopSlave()
	p.stopMaster()

	p2 := startMaster(t, earlier, 1)
	defer p2.stopMaster()
	s, err := NewSlave(SlaveConfig{Store: p.slave, FS: p.slaveFS, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p2.addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Run(ctx); !errors.Is(err, ErrDiverged) || !errors.Is(err, store.ErrTruncateVisible) {
		t.Fatalf("Run against a master that lost what the slave showed: %v", err)
	}
	if w := p.slave.Offset(store.Written); w != end {
		t.Fatalf("the slave cut its log to %d, was %d", w, end)
	}
	if n := p.slave.MaxOffset("T", 0); n != 20 {
		t.Fatalf("the slave shows %d messages, showed 20", n)
	}
	p.slave.Close()
}
