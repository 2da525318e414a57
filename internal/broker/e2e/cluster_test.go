// Package e2e drives an in-process NameServer and Broker with the official
// RocketMQ Go client (github.com/apache/rocketmq-client-go/v2), exactly as an
// application does. Every test is bounded by deadlines; waits poll for
// conditions.
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
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

// cluster is a NameServer and one broker on free loopback ports.
type cluster struct {
	t       *testing.T
	dir     string
	nsAddr  string
	ns      *namesrv.Server
	nsSrv   *remoting.Server
	brAddr  string
	st      *store.Store
	br      *broker.Broker
	brSrv   *remoting.Server
	brDone  chan struct{}
	stopRun context.CancelFunc
}

var instanceSeq atomic.Int64

// uniq returns a name unique within the test process.
func uniq(prefix string) string {
	return fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), instanceSeq.Add(1))
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{t: t, dir: t.TempDir()}
	c.ns = namesrv.New(namesrv.Config{})
	ln := listen(t, "127.0.0.1:0")
	c.nsAddr = ln.Addr().String()
	c.nsSrv = remoting.NewServer(remoting.ServerConfig{OnConnClose: c.ns.OnConnClose}, c.ns.Handler())
	go c.nsSrv.Serve(ln)
	go c.ns.Run(context.Background())
	c.startBroker("127.0.0.1:0")
	c.waitRoute(broker.DefaultTopic) // producers fall back to its route for new topics
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
	var ln net.Listener
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err = net.Listen("tcp", addr)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the port of a just-closed listener may linger briefly
	}
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	return ln
}

func (c *cluster) startBroker(addr string) {
	t := c.t
	t.Helper()
	scfg := store.DefaultConfig(c.dir)
	scfg.CommitLogSegmentBytes = 64 << 20
	scfg.IndexHashSlots, scfg.IndexMaxEntries = 10000, 40000
	st, err := store.Open(scfg)
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	ln := listen(t, addr)
	cfg := broker.DefaultConfig()
	cfg.DataDir = c.dir
	cfg.AdvertisedAddr = ln.Addr().String()
	cfg.NamesrvAddrs = []string{c.nsAddr}
	br, err := broker.New(cfg, st, nil)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	c.brSrv = remoting.NewServer(remoting.ServerConfig{OnConnClose: br.OnConnClose}, br.Handler())
	go c.brSrv.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	c.brDone = make(chan struct{})
	go func(done chan struct{}) { defer close(done); br.Run(ctx) }(c.brDone)
	c.st, c.br, c.brAddr, c.stopRun = st, br, ln.Addr().String(), cancel
}

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
	c.stopRun()
	<-c.brDone
	if err := c.st.Close(); err != nil {
		c.t.Errorf("store close: %v", err)
	}
	c.br = nil
}

// restartBroker stops the broker and starts it again on the same address
// and data directory.
func (c *cluster) restartBroker() {
	addr := c.brAddr
	c.stopBroker()
	c.startBroker(addr)
}

// invoke sends one request to addr with a throw-away remoting client.
func (c *cluster) invoke(addr string, code int16, ext map[string]string) *remoting.Command {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{})
	if err != nil {
		c.t.Fatalf("dial %s: %v", addr, err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(code, ext, nil))
	if err != nil {
		c.t.Fatalf("invoke %d: %v", code, err)
	}
	return resp
}

// waitRoute waits until the NameServer serves a route for topic.
func (c *cluster) waitRoute(topic string) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, "route of "+topic, func() bool {
		return c.invoke(c.nsAddr, remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}).Code == 0
	})
}

// createTopic creates a topic on the broker (as the admin tool does) and
// waits for its route.
func (c *cluster) createTopic(topic string, queues int) {
	c.t.Helper()
	resp := c.invoke(c.brAddr, remoting.ReqUpdateAndCreateTopic, map[string]string{
		"topic": topic, "readQueueNums": fmt.Sprint(queues), "writeQueueNums": fmt.Sprint(queues), "perm": "6"})
	if resp.Code != 0 {
		c.t.Fatalf("create topic %s: %d %s", topic, resp.Code, resp.Remark)
	}
	c.waitRoute(topic)
}

func (c *cluster) nsAddrs() primitive.NamesrvAddr { return primitive.NamesrvAddr{c.nsAddr} }

func skipUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("the Go client races internally here (see race_on_test.go)")
	}
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
