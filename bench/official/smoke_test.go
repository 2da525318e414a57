package official

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// TestOfficialClientSmoke runs the driver for a moment against an
// in-process NameServer and broker.
func TestOfficialClientSmoke(t *testing.T) {
	if raceEnabled {
		t.Skip("the official Go client races internally (see internal/broker/e2e)")
	}
	ns := startCluster(t)
	for _, sync := range []int{0, 2} {
		w := bench.DefaultWorkload()
		w.Name, w.QueuesPerTopic, w.MessageSize, w.Producers, w.InflightPerProducer = "official-smoke", 2, 256, 2, 4
		w.SyncSenders, w.BatchSize, w.ProducerRate = sync, 1+sync, 400
		if sync > 0 {
			w.InflightPerProducer = 1
		}
		w.Warmup, w.Duration = 200*time.Millisecond, 700*time.Millisecond
		res, err := drive(context.Background(), w, ns, "ASYNC_FLUSH")
		if err != nil {
			t.Fatal(err)
		}
		l := res.Send.Latency
		if res.Send.Messages == 0 || res.TotalSendErrors != 0 || l.P50 <= 0 || l.P50 > l.P99 || l.P99 > l.Max {
			t.Fatalf("sync senders %d: %+v, errors %v", sync, res.Send, res.Errors)
		}
	}
}

// startCluster starts a NameServer and a broker on loopback ports and
// returns the NameServer address.
func startCluster(t *testing.T) string {
	dir := t.TempDir()
	nsrv := namesrv.New(namesrv.Config{})
	nsLn := listen(t)
	nsSrv := remoting.NewServer(remoting.ServerConfig{OnConnClose: nsrv.OnConnClose}, nsrv.Handler())
	go nsSrv.Serve(nsLn)
	ctx, cancel := context.WithCancel(context.Background())
	go nsrv.Run(ctx)
	scfg := store.DefaultConfig(dir)
	scfg.FlushDiskType = store.AsyncFlush
	scfg.CommitLogSegmentBytes = 64 << 20
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 10000, 40000
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatal(err)
	}
	brLn := listen(t)
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.AdvertisedAddr, cfg.NamesrvAddrs = dir, brLn.Addr().String(), []string{nsLn.Addr().String()}
	br, err := broker.New(cfg, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	brSrv := remoting.NewServer(remoting.ServerConfig{OnConnClose: br.OnConnClose}, br.Handler())
	go brSrv.Serve(brLn)
	brDone := make(chan struct{})
	go func() { defer close(brDone); br.Run(ctx) }()
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		brSrv.Shutdown(sctx)
		br.Close()
		cancel()
		<-brDone
		st.Close()
		nsSrv.Shutdown(sctx)
		nsrv.Close()
	})
	return nsLn.Addr().String()
}

func listen(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}
