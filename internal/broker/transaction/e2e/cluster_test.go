package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/broker/transaction"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("fatal")
	os.Exit(m.Run())
}

const dataDir = "/keel"

// cluster is a NameServer and one broker with the transaction engine.
type cluster struct {
	t      *testing.T
	fs     *vfs.MemFS
	mut    func(*transaction.Config)
	nsAddr string
	ns     *namesrv.Server
	nsSrv  *remoting.Server
	brAddr string
	st     *store.Store
	br     *broker.Broker
	eng    *transaction.Engine
	brSrv  *remoting.Server
	cancel context.CancelFunc
	done   chan struct{}
}

var seq atomic.Int64

func uniq(prefix string) string { return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), seq.Add(1)) }

func startCluster(t *testing.T, mut func(*transaction.Config)) *cluster {
	t.Helper()
	if raceEnabled {
		t.Skip("the Go client races internally (see race_on_test.go)")
	}
	c := &cluster{t: t, fs: vfs.NewMem(), mut: mut}
	c.ns = namesrv.New(namesrv.Config{})
	ln := listen(t, "127.0.0.1:0")
	c.nsAddr = ln.Addr().String()
	c.nsSrv = remoting.NewServer(remoting.ServerConfig{OnConnClose: c.ns.OnConnClose}, c.ns.Handler())
	go c.nsSrv.Serve(ln)
	go c.ns.Run(context.Background())
	c.startBroker("127.0.0.1:0")
	c.waitRoute(broker.DefaultTopic)
	t.Cleanup(func() {
		c.stopBroker()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.nsSrv.Shutdown(ctx)
		c.ns.Close()
	})
	return c
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln
		}
		if time.Now().After(deadline) {
			t.Fatalf("listen %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond) // a just-closed port may linger
	}
}

func (c *cluster) startBroker(addr string) {
	t := c.t
	t.Helper()
	scfg := store.DefaultConfig(dataDir)
	scfg.FS = c.fs
	scfg.FlushDiskType = store.SyncFlush
	scfg.CommitLogSegmentBytes = 16 << 20
	scfg.MaxMessageBytes = 1 << 20
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 4096, 100000
	scfg.FlushConsumeQueueInterval = 50 * time.Millisecond
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	ln := listen(t, addr)
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.FS = dataDir, c.fs
	cfg.AdvertisedAddr = ln.Addr().String()
	cfg.NamesrvAddrs = []string{c.nsAddr}
	br, err := broker.New(cfg, st, nil)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	tcfg := transaction.Config{Store: st, Producers: br, StoreHost: br.StoreHost(), BrokerName: cfg.BrokerName,
		Dir: dataDir, FS: c.fs, CheckInterval: 100 * time.Millisecond, Timeout: 300 * time.Millisecond, CheckMax: 15}
	if c.mut != nil {
		c.mut(&tcfg)
	}
	eng, err := transaction.New(tcfg)
	if err != nil {
		t.Fatalf("transaction.New: %v", err)
	}
	br.SetTransactions(eng)
	c.brSrv = remoting.NewServer(remoting.ServerConfig{OnConnClose: br.OnConnClose}, br.Handler())
	go c.brSrv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	c.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		go eng.Run(ctx)
		br.Run(ctx)
	}(c.done)
	c.st, c.br, c.eng, c.brAddr, c.cancel = st, br, eng, ln.Addr().String(), cancel
}

// stopBroker shuts the broker down cleanly.
func (c *cluster) stopBroker() {
	if c.br == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.brSrv.Shutdown(ctx)
	if err := c.br.Close(); err != nil {
		c.t.Errorf("broker close: %v", err)
	}
	if err := c.eng.Close(); err != nil {
		c.t.Errorf("engine close: %v", err)
	}
	c.cancel()
	<-c.done
	if err := c.st.Close(); err != nil {
		c.t.Errorf("store close: %v", err)
	}
	c.br = nil
}

// kill simulates kill -9 of the broker process: connections drop at once
// (no response leaves after this point), the durable state of the files
// is captured as a power loss would leave it, and the old process state is
// abandoned (torn down on the discarded filesystem). start brings a new
// broker up on the captured files and the same address.
func (c *cluster) kill() {
	addr := c.brAddr
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace period
	c.brSrv.Shutdown(ctx)
	durable := c.fs.CrashClone()
	c.br.Close()
	c.eng.Close()
	c.cancel()
	<-c.done
	c.st.Close()
	c.br = nil
	c.fs = durable
	c.startBroker(addr)
}

func (c *cluster) invoke(code int16, ext map[string]string) *remoting.Command {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, c.nsAddr, remoting.ClientConfig{})
	if err != nil {
		c.t.Fatalf("dial: %v", err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(code, ext, nil))
	if err != nil {
		c.t.Fatalf("invoke %d: %v", code, err)
	}
	return resp
}

func (c *cluster) waitRoute(topic string) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, "route of "+topic, func() bool {
		return c.invoke(remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}).Code == 0
	})
}

func (c *cluster) createTopic(topic string, queues int) {
	c.t.Helper()
	if _, err := c.br.EnsureTopic(topic, int32(queues), 6); err != nil {
		c.t.Fatalf("create topic %s: %v", topic, err)
	}
	c.waitRoute(topic)
}

func (c *cluster) nsAddrs() primitive.NamesrvAddr { return primitive.NamesrvAddr{c.nsAddr} }

// stored returns how many records of topic (all queues) carry each body,
// read straight from the store.
func (c *cluster) stored(topic string) map[string]int {
	c.t.Helper()
	out := map[string]int{}
	for _, q := range c.st.Queues(topic) {
		for off := c.st.MinOffset(topic, q); off < c.st.MaxOffset(topic, q); {
			r, err := c.st.GetMessage(topic, q, off, 256, 4<<20, nil)
			if err != nil {
				c.t.Fatal(err)
			}
			for _, rec := range r.Records {
				out[string(message.View(rec).Body())]++
			}
			off = r.NextOffset
			r.Release()
		}
	}
	return out
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
