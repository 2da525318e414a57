package kafka

import (
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// testNode is a store, a core and a Kafka server on a loopback port.
type testNode struct {
	fs   *vfs.MemFS
	st   *store.Store
	core *core.Broker
	srv  *Server
	addr string
	done chan error
}

func startNode(t testing.TB, fs *vfs.MemFS) *testNode {
	t.Helper()
	return startNodeWith(t, fs, Config{})
}

// startNodeWith is startNode with a server configuration.
func startNodeWith(t testing.TB, fs *vfs.MemFS, cfg Config) *testNode {
	t.Helper()
	return startNodeStore(t, fs, cfg, nil)
}

// startNodeStore is startNodeWith with the store's configuration changed
// by mod (nil: none).
func startNodeStore(t testing.TB, fs *vfs.MemFS, cfg Config, mod func(*store.Config)) *testNode {
	t.Helper()
	if fs == nil {
		fs = vfs.NewMem()
	}
	scfg := store.DefaultConfig("/data")
	scfg.FS = fs
	scfg.FlushDiskType = store.SyncFlush
	scfg.CommitLogSegmentBytes = 64 << 20
	scfg.ConsumeQueueSegmentEntries = 10000
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 100, 400
	if mod != nil {
		mod(&scfg)
	}
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := core.New(core.Config{DataDir: "/data", FS: fs, AutoCreateTopicEnable: true, AutoCreateSubscriptionGroup: true,
		DefaultTopicQueueNums: 2, MaxMessageSize: 4 << 20}, st, nil)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &testNode{fs: fs, st: st, core: c, addr: ln.Addr().String(), done: make(chan error, 1)}
	n.srv = New(cfg, c, slog.New(slog.NewTextHandler(io.Discard, nil)))
	go func() { n.done <- n.srv.Serve(ln) }()
	t.Cleanup(n.stop)
	return n
}

// stop closes the server, the core and the store (idempotent).
func (n *testNode) stop() {
	if n.srv == nil {
		return
	}
	n.srv.Close()
	<-n.done
	n.core.Close()
	n.st.Close()
	n.srv = nil
}
