package bench

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// testCluster is a NameServer, a store and a broker in this process on
// loopback ports, stopped by t.Cleanup.
type testCluster struct {
	nsAddr, brAddr string
	st             *store.Store
}

func startCluster(tb testing.TB, flush store.FlushDiskType) *testCluster {
	tb.Helper()
	dir := tb.TempDir()
	ns := namesrv.New(namesrv.Config{})
	nsLn := listen(tb)
	nsSrv := remoting.NewServer(remoting.ServerConfig{OnConnClose: ns.OnConnClose}, ns.Handler())
	go nsSrv.Serve(nsLn)
	nsCtx, nsCancel := context.WithCancel(context.Background())
	go ns.Run(nsCtx)

	scfg := store.DefaultConfig(dir)
	scfg.FlushDiskType = flush
	scfg.CommitLogSegmentBytes = 256 << 20
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 100000, 400000
	st, err := store.Open(scfg)
	if err != nil {
		tb.Fatalf("store.Open: %v", err)
	}
	brLn := listen(tb)
	cfg := broker.DefaultConfig()
	cfg.DataDir = dir
	cfg.AdvertisedAddr = brLn.Addr().String()
	cfg.NamesrvAddrs = []string{nsLn.Addr().String()}
	br, err := broker.New(cfg, st, nil)
	if err != nil {
		tb.Fatalf("broker.New: %v", err)
	}
	brSrv := remoting.NewServer(remoting.ServerConfig{OnConnClose: br.OnConnClose}, br.Handler())
	go brSrv.Serve(brLn)
	brCtx, brCancel := context.WithCancel(context.Background())
	brDone := make(chan struct{})
	go func() { defer close(brDone); br.Run(brCtx) }()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		brSrv.Shutdown(ctx)
		br.Close()
		brCancel()
		<-brDone
		st.Close()
		nsSrv.Shutdown(ctx)
		nsCancel()
		ns.Close()
	})
	return &testCluster{nsAddr: nsLn.Addr().String(), brAddr: brLn.Addr().String(), st: st}
}

func listen(tb testing.TB) net.Listener {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	return ln
}
