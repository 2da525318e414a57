package testcluster

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/broker"
	"github.com/keelmq/keel/internal/broker/dedup"
	"github.com/keelmq/keel/internal/broker/schedule"
	"github.com/keelmq/keel/internal/broker/transaction"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// shutdownTimeout bounds a clean stop of a remoting server.
const shutdownTimeout = 5 * time.Second

// Cluster is a NameServer and one broker on loopback ports.
type Cluster struct {
	tb  testing.TB
	o   options
	fs  vfs.FS
	dir string

	nsAddr   string
	ns       *namesrv.Server
	nsSrv    *remoting.Server
	nsCancel context.CancelFunc

	brAddr  string // the broker's listener; kept across restarts
	advAddr string // what the broker advertises
	node    *node  // the running broker; nil when stopped
}

// node is one incarnation of the broker process.
type node struct {
	cfg    broker.Config
	st     *store.Store
	br     *broker.Broker
	svc    *schedule.Service
	eng    *transaction.Engine
	dd     *dedup.Deduplicator
	srv    *remoting.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start starts a NameServer and a broker, waits until the NameServer
// serves the route of the default topic (producers fall back to it for new
// topics), and registers their shutdown with tb.Cleanup.
func Start(tb testing.TB, opts ...Option) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb, fs: vfs.OS{}}
	for _, opt := range opts {
		opt(&c.o)
	}
	c.dir = c.o.dir
	switch {
	case c.o.mem != nil:
		c.fs = c.o.mem
		if c.dir == "" {
			c.dir = MemDir
		}
	case c.dir == "":
		c.dir = tb.TempDir()
	}
	c.startNamesrv()
	tb.Cleanup(c.close)
	c.startBroker("127.0.0.1:0")
	return c
}

func (c *Cluster) startNamesrv() {
	c.ns = namesrv.New(namesrv.Config{})
	var ln net.Listener = listen(c.tb, "127.0.0.1:0")
	c.nsAddr = ln.Addr().String()
	if c.o.namesrvLn != nil {
		ln = c.o.namesrvLn(ln)
	}
	c.nsSrv = remoting.NewServer(remoting.ServerConfig{OnConnClose: c.ns.OnConnClose}, c.ns.Handler())
	go c.nsSrv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	c.nsCancel = cancel
	go c.ns.Run(ctx)
}

func (c *Cluster) close() {
	c.stopBroker()
	shutdown(c.nsSrv, shutdownTimeout)
	c.nsCancel()
	c.ns.Close()
}

// startBroker opens the store and starts the broker (and its engines) on
// addr.
func (c *Cluster) startBroker(addr string) {
	c.tb.Helper()
	n := &node{}
	st, err := store.Open(c.storeConfig())
	if err != nil {
		c.tb.Fatalf("testcluster: store.Open: %v", err)
	}
	n.st = st
	ln := listen(c.tb, addr)
	c.brAddr, c.advAddr = ln.Addr().String(), ln.Addr().String()
	if c.o.advertise != nil {
		c.advAddr = c.o.advertise(c.brAddr)
	}
	n.cfg = c.brokerConfig()
	if n.br, err = broker.New(n.cfg, st, nil); err != nil {
		ln.Close()
		st.Close()
		c.tb.Fatalf("testcluster: broker.New: %v", err)
	}
	c.node = n // from here on, stopBroker tears down what exists
	if err := c.addEngines(n); err != nil {
		ln.Close()
		c.tb.Fatalf("testcluster: %v", err)
	}
	c.serve(n, ln)
	c.WaitRoute(broker.DefaultTopic)
}

func (c *Cluster) storeConfig() store.Config {
	cfg := store.DefaultConfig(c.dir)
	cfg.FS = c.fs
	cfg.CommitLogSegmentBytes = 16 << 20
	cfg.IndexHashSlots, cfg.IndexMaxEntries = 10000, 40000
	if c.o.scheduler {
		cfg.TagsCode = schedule.StoreTagsCode(c.delayLevels())
	}
	for _, mut := range c.o.storeMut {
		mut(&cfg)
	}
	return cfg
}

func (c *Cluster) delayLevels() []time.Duration {
	if c.o.levels == nil {
		return schedule.DefaultDelayLevels()
	}
	return c.o.levels
}

func (c *Cluster) brokerConfig() broker.Config {
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.FS = c.dir, c.fs
	cfg.AdvertisedAddr = c.advAddr
	cfg.NamesrvAddrs = []string{c.nsAddr}
	for _, mut := range c.o.brokerMut {
		mut(&cfg)
	}
	return cfg
}

// addEngines installs scheduled delivery, de-duplication and the
// transaction engine as configured (in the order keel serve does).
func (c *Cluster) addEngines(n *node) error {
	var err error
	if c.o.scheduler {
		n.svc, err = schedule.New(schedule.Config{Dir: c.dir, FS: c.fs, DelayLevels: c.delayLevels()}, n.st)
		if err != nil {
			return err
		}
		n.br.SetScheduler(n.svc)
	}
	if c.o.dedup > 0 {
		if n.dd, err = dedup.New(dedup.Config{Window: c.o.dedup, Index: n.st}); err != nil {
			return err
		}
		n.br.SetDeduplicator(n.dd)
	}
	if c.o.txn {
		cfg := transaction.Config{Store: n.st, Producers: n.br, StoreHost: n.br.StoreHost(), Dir: c.dir, FS: c.fs}
		if c.o.txnMut != nil {
			c.o.txnMut(&cfg)
		}
		if n.eng, err = transaction.New(cfg); err != nil {
			return err
		}
		n.br.SetTransactions(n.eng)
	}
	return nil
}

// serve starts the broker's remoting server and the Run loops.
func (c *Cluster) serve(n *node, ln net.Listener) {
	h := n.br.Handler()
	if c.o.handler != nil {
		h = c.o.handler(h)
	}
	if c.o.brokerLn != nil {
		ln = c.o.brokerLn(ln)
	}
	n.srv = remoting.NewServer(remoting.ServerConfig{OnConnClose: n.br.OnConnClose, Logger: c.o.remotingLg}, h)
	go n.srv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	run := func(f func(context.Context) error) {
		n.wg.Add(1)
		go func() { defer n.wg.Done(); f(ctx) }()
	}
	run(n.br.Run)
	if n.svc != nil {
		run(n.svc.Run)
	}
	if n.eng != nil {
		run(n.eng.Run)
	}
}

// stopBroker shuts the broker down cleanly; errors fail the test.
func (c *Cluster) stopBroker() {
	n := c.node
	if n == nil {
		return
	}
	c.node = nil
	for _, err := range n.teardown(shutdownTimeout) {
		c.tb.Errorf("testcluster: %v", err)
	}
}

// teardown stops everything n started, in the order keel serve does, and
// returns the errors; a zero grace drops connections at once.
func (n *node) teardown(grace time.Duration) []error {
	var errs []error
	keep := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if n.srv != nil {
		shutdown(n.srv, grace)
	}
	keep("broker close", n.br.Close())
	if n.svc != nil {
		keep("schedule close", n.svc.Close())
	}
	if n.eng != nil {
		keep("engine close", n.eng.Close())
	}
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	keep("store close", n.st.Close())
	return errs
}

// Restart stops the broker cleanly and starts it again on the same address
// and data.
func (c *Cluster) Restart() {
	c.tb.Helper()
	addr := c.brAddr
	c.stopBroker()
	c.startBroker(addr)
}

// Kill simulates kill -9 of the broker process followed by a power loss:
// connections drop at once (no response leaves after this point), the
// durable state of the files is captured as a power loss would leave it,
// and the old process state is abandoned (torn down on the discarded
// filesystem). A new broker then starts on the captured files and the same
// address. It needs WithMemFS.
func (c *Cluster) Kill() {
	c.tb.Helper()
	if c.o.mem == nil {
		c.tb.Fatal("testcluster: Kill needs WithMemFS")
	}
	addr, n := c.brAddr, c.node
	c.node = nil
	if n != nil {
		shutdown(n.srv, 0) // no grace period: no response leaves from here on
		n.srv = nil
		durable := c.o.mem.CrashClone()
		n.teardown(0) // on the discarded filesystem: errors are expected
		c.o.mem, c.fs = durable, durable
	}
	c.startBroker(addr)
}

func shutdown(s *remoting.Server, grace time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	s.Shutdown(ctx)
}
