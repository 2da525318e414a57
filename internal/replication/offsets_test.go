package replication

import (
	"context"
	"net"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/vfs"
)

func TestOffsetsFrameRoundTrip(t *testing.T) {
	offs := []OffsetReport{{"g", "t", 0, 12}, {"g2", "%RETRY%g2", 3, 0}}
	got, err := decodeOffsets(encodeOffsets(offs))
	if err != nil || !reflect.DeepEqual(got, offs) {
		t.Fatalf("decoded %+v %v", got, err)
	}
	good := encodeOffsets(offs)
	for name, p := range map[string][]byte{
		"truncated":       good[:len(good)-1],
		"trailing":        append(append([]byte(nil), good...), 0),
		"forged count":    {0xff, 0xff, 0xff, 0xff},
		"negative offset": encodeOffsets([]OffsetReport{{"g", "t", 0, -1}}),
		"empty group":     encodeOffsets([]OffsetReport{{"", "t", 0, 1}}),
	} {
		if _, err := decodeOffsets(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecodeOffsets(f *testing.F) {
	f.Add(encodeOffsets([]OffsetReport{{"g", "t", 1, 2}}))
	f.Fuzz(func(t *testing.T, p []byte) {
		checkFrameAllocs(t, appendFrame(nil, typeOffsets, p))
		offs, err := decodeOffsets(p)
		if err == nil && !reflect.DeepEqual(encodeOffsets(offs), p) {
			t.Fatalf("accepted %x, re-encodes differently", p)
		}
	})
}

// TestSlaveReportsItsOffsetsEverySession: the offsets a replica's broker
// holds reach the master at the start of each session (more than one
// frame's worth too), so a report lost with a connection comes again,
// and new ones while it streams.
func TestSlaveReportsItsOffsetsEverySession(t *testing.T) {
	var mu sync.Mutex
	var got []OffsetReport
	sessions := 0
	fs := vfs.NewMem()
	cfg := storeConfig(fs)
	st := openStore(t, cfg)
	m, err := NewMaster(MasterConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a",
		HeartbeatInterval: 50 * time.Millisecond,
		OnReplicaOffsets: func(id int64, offs []OffsetReport) {
			mu.Lock()
			defer mu.Unlock()
			if id == 1 {
				got = append(got, offs...)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{master: st, m: m}
	serve := func() {
		ln := listen(t)
		p.addr = ln.Addr().String()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { m.Serve(ctx, ln); close(done) }()
		p.stopMaster = func() { cancel(); <-done }
	}
	serve()
	local := make([]OffsetReport, maxOffsetsPerFrame+5)
	for i := range local {
		local[i] = OffsetReport{Group: "g", Topic: "t", QueueID: int32(i), Offset: int64(i)}
	}
	sfs := vfs.NewMem()
	scfg := storeConfig(sfs)
	scfg.Replica = true
	sst := openStore(t, scfg)
	defer sst.Close()
	s, err := NewSlave(SlaveConfig{Store: sst, FS: sfs, DataDir: "/data", BrokerName: "broker-a", BrokerID: 1,
		MasterAddr: p.addr, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond,
		LocalOffsets: func() []OffsetReport {
			mu.Lock()
			defer mu.Unlock()
			sessions++
			return append([]OffsetReport(nil), local...)
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	defer func() { cancel(); <-stopped }()
	waitUntil(t, "the report", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == len(local) })
	mu.Lock()
	if !reflect.DeepEqual(got, local) {
		t.Fatalf("master got %d offsets, not the replica's %d", len(got), len(local))
	}
	got = nil
	// A commit on the replica while it streams is reported within a
	// second or so, without a new session.
	local = append(local, OffsetReport{Group: "g2", Topic: "t", QueueID: 0, Offset: 7})
	mu.Unlock()
	waitUntil(t, "the report of a new commit", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == len(local) })
	mu.Lock()
	got = nil
	mu.Unlock()
	// The master restarts on the same address: the next session reports again.
	p.stopMaster()
	ln := listenOn(t, p.addr)
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan struct{})
	go func() { m.Serve(ctx2, ln); close(done2) }()
	defer func() { cancel2(); <-done2; st.Close() }()
	waitUntil(t, "the second report", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == len(local) && sessions >= 2 })
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// listenOn listens on addr again, retrying while the old listener's port
// is not free yet.
func listenOn(t *testing.T, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
