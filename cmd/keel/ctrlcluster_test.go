package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/faultproxy"
)

// ctrlClusterOpts describes a controller-mode cluster for a test: three
// controllers, a NameServer and broker groups in real processes, every
// port chosen at run time.
type ctrlClusterOpts struct {
	name    string   // brokerClusterName
	groups  []string // brokerName of each group; default broker-a
	members int      // brokers per group; default 3
	role    string   // brokerRole; default SYNC_MASTER (with minInSyncReplicas=2)

	// The doors every member opens on a port of its own (the others are
	// off); kafkaNodeBase gives group i the kafkaNodeId base 100*i.
	kafka, amqp, http bool
	kafkaNodeBase     bool

	ctrlConf   string // more controller.conf lines
	brokerConf string // more broker.conf lines (every group's)

	// ctrlProxies puts a fault proxy of its own on each broker's link to
	// each controller (toCtrl[broker][controller]); replProxies one on
	// each broker's replication listener (repl[broker], named to the
	// controllers with haAdvertisedAddress).
	ctrlProxies, replProxies bool

	// netns runs every process in a network namespace of its own (see
	// netnsLayout); the test runs in its client namespace. No proxies.
	netns *netnsLayout
}

// ctrlCluster is a running cluster of ctrlClusterOpts. It embeds its
// first group, for the tests of one group.
type ctrlCluster struct {
	*ctrlGroup
	opts   ctrlClusterOpts
	ctrl   []string // the controllers' addresses
	cprocs []*controllerProc
	cdirs  []string
	cconf  string
	ctrlNS []string // the controllers' namespaces (netns)
	ns     string   // the NameServer's address
	groups []*ctrlGroup
}

// ctrlGroup is one broker group of a ctrlCluster.
type ctrlGroup struct {
	name    string
	brokers []*failoverBroker
	kafka   []string // each member's Kafka door ("" when off)
	amqp    []string
	http    []string
	toCtrl  [][]*faultproxy.Proxy
	repl    []*faultproxy.Proxy
	group   func() *controller.Group // the group as the controllers hold it
}

// byName is the group called name.
func (c *ctrlCluster) byName(name string) *ctrlGroup {
	for _, g := range c.groups {
		if g.name == name {
			return g
		}
	}
	return nil
}

func newFaultProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// startCtrlCluster starts the cluster of o: the controllers (waiting for
// an acting leader of three voters), the NameServer, then every broker.
func startCtrlCluster(t *testing.T, o ctrlClusterOpts) *ctrlCluster {
	t.Helper()
	if len(o.groups) == 0 {
		o.groups = []string{"broker-a"}
	}
	if o.members == 0 {
		o.members = 3
	}
	if o.role == "" {
		o.role = "SYNC_MASTER"
	}
	if o.netns != nil && (o.ctrlProxies || o.replProxies) {
		t.Fatal("a cluster in network namespaces has no proxies")
	}
	per := 2 + 3 // broker, ha, and the three doors
	ports := reserveLoopbackPorts(t, 3+1+len(o.groups)*o.members*per)
	host := func(node string, port string) string { return port } // loopback
	if o.netns != nil {
		host = func(node string, port string) string {
			_, p, _ := net.SplitHostPort(port)
			return net.JoinHostPort(o.netns.ip(node), p)
		}
	}
	c := &ctrlCluster{opts: o}
	for i := range 3 {
		c.ctrl = append(c.ctrl, host(ctrlNode(i), ports[i]))
		if o.netns != nil {
			c.ctrlNS = append(c.ctrlNS, o.netns.ns(ctrlNode(i)))
		} else {
			c.ctrlNS = append(c.ctrlNS, "")
		}
	}
	c.ns = host(namesrvNode, ports[3])
	confDir := t.TempDir()
	c.cconf = filepath.Join(confDir, "controller.conf")
	if err := os.WriteFile(c.cconf, []byte("controllerHeartBeatTimeoutMills=2000\nscanInactiveMasterInterval=200\ncontrollerFenceTimeoutMillis=1000\n"+
		o.ctrlConf), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		c.cdirs = append(c.cdirs, t.TempDir())
		c.cprocs = append(c.cprocs, nil)
		c.startController(t, i, true)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range c.cprocs {
				t.Logf("controller %d log:\n%s", i, p.logs.String())
			}
		}
	})
	waitFor(t, "an acting controller leader", 30*time.Second, func() bool {
		st, ok := controllerStatus(t, c.ctrl)
		return ok && st.Acting && len(st.Voters) == 3
	})
	nsNS := ""
	if o.netns != nil {
		nsNS = o.netns.ns(namesrvNode)
	}
	startKeelProcIn(t, nsNS, "namesrv", "--namesrv-listen", c.ns)
	next := 4
	for gi, name := range o.groups {
		g := &ctrlGroup{name: name}
		for i := range o.members {
			node := brokerNode(gi, i)
			b := &failoverBroker{dir: t.TempDir(), addr: host(node, ports[next])}
			ha := host(node, ports[next+1])
			door := func(on bool, k int) string {
				if on {
					return host(node, ports[next+2+k])
				}
				return ""
			}
			g.kafka = append(g.kafka, door(o.kafka, 0))
			g.amqp = append(g.amqp, door(o.amqp, 1))
			g.http = append(g.http, door(o.http, 2))
			next += per
			ip := "127.0.0.1"
			if o.netns != nil {
				b.netns, ip = o.netns.ns(node), o.netns.ip(node)
			}
			ctrlAddrs := c.ctrl
			if o.ctrlProxies {
				ctrlAddrs = g.proxyControllers(t, c.ctrl)
			}
			conf := "brokerClusterName=" + o.name + "\nbrokerName=" + name + "\nbrokerRole=" + o.role + "\n" +
				"enableControllerMode=true\ncontrollerAddr=" + strings.Join(ctrlAddrs, ";") + "\nflushDiskType=SYNC_FLUSH\n" +
				"replicaAckTimeoutMillis=2000\nhttpListen=\namqpListen=\nkafkaListen=\nbrokerIP1=" + ip + "\n"
			if o.role == "SYNC_MASTER" {
				conf += "minInSyncReplicas=2\n"
			}
			if o.kafkaNodeBase {
				conf += fmt.Sprintf("kafkaNodeId=%d\n", 100*gi)
			}
			if o.netns != nil {
				// A replication listener beyond loopback must authenticate
				// its slaves.
				conf += "haAuthSecret=" + o.netns.Bridge + "-replication-secret\n"
			}
			if o.replProxies {
				rp := newFaultProxy(t, ha)
				g.repl = append(g.repl, rp)
				conf += "haAdvertisedAddress=" + rp.Addr() + "\n"
			}
			bconf := filepath.Join(confDir, fmt.Sprintf("%s-%d.conf", name, i))
			if err := os.WriteFile(bconf, []byte(conf+o.brokerConf), 0o600); err != nil {
				t.Fatal(err)
			}
			b.args = []string{"broker", "-c", bconf, "--data-dir", b.dir, "-n", c.ns, "--broker-listen", b.addr, "--ha-listen", ha}
			amqpListen := g.amqp[i]
			if o.netns != nil && o.amqp {
				// Guest logs in from loopback only: the door listens on the
				// namespace's loopback, a relay in the namespace on its
				// address (startRelayIn).
				_, p, _ := net.SplitHostPort(g.amqp[i])
				amqpListen = "127.0.0.1:" + p
				startRelayIn(t, b.netns, g.amqp[i], amqpListen)
			}
			for _, d := range [][2]string{{"--kafka-listen", g.kafka[i]}, {"--amqp-listen", amqpListen}, {"--http-listen", g.http[i]}} {
				if d[1] != "" {
					b.args = append(b.args, d[0], d[1])
				}
			}
			b.start(t)
			g.brokers = append(g.brokers, b)
		}
		g.group = groupFromControllers(t, c.ctrl, name)
		c.groups = append(c.groups, g)
	}
	c.ctrlGroup = c.groups[0]
	return c
}

// proxyControllers puts a fault proxy of a new member of g in front of
// each controller and returns their addresses (appending to g.toCtrl).
// A follower's redirect names the raft leader's own address; the broker
// is told its proxy for that controller instead, so that every one of
// its controller connections crosses its proxies.
func (g *ctrlGroup) proxyControllers(t *testing.T, ctrl []string) []string {
	t.Helper()
	var via []string
	var pxs []*faultproxy.Proxy
	for _, a := range ctrl {
		p := newFaultProxy(t, a)
		pxs = append(pxs, p)
		via = append(via, p.Addr())
	}
	var pairs [][2][]byte
	for j, a := range ctrl {
		if len(a) != len(via[j]) {
			t.Fatalf("controller address %s and its proxy %s differ in length: the rewrite keeps frame lengths", a, via[j])
		}
		pairs = append(pairs, [2][]byte{[]byte(a), []byte(via[j])})
	}
	for _, p := range pxs {
		p.RewriteFrames(faultproxy.Backward, remotingFrame, func(b []byte) []byte {
			for _, pr := range pairs {
				b = bytes.ReplaceAll(b, pr[0], pr[1])
			}
			return b
		})
	}
	g.toCtrl = append(g.toCtrl, pxs)
	return via
}

// startController starts controller i from its data directory; the
// first start of controller 0 bootstraps the voters.
func (c *ctrlCluster) startController(t *testing.T, i int, first bool) {
	t.Helper()
	extra := []string{"-c", c.cconf}
	if first && i == 0 {
		extra = append(extra, "--bootstrap="+strings.Join(c.ctrl, ","))
	}
	prev := c.cprocs[i]
	c.cprocs[i] = startControllerProcIn(t, c.ctrlNS[i], c.cdirs[i], c.ctrl[i], extra...)
	keepLogs(prev, c.cprocs[i])
}

// keepLogs puts the logs of prev (a process that ended; nil: none) before
// those of next, its restart, so that a failure shows every incarnation.
func keepLogs(prev, next *controllerProc) {
	if prev == nil {
		return
	}
	<-prev.exited
	next.logs.prepend(prev.logs.String() + "--- restarted ---\n")
}

// start starts (or restarts) b with its arguments, in its namespace.
func (b *failoverBroker) start(t *testing.T) {
	t.Helper()
	prev := b.proc
	b.proc = startKeelProcIn(t, b.netns, b.args...)
	keepLogs(prev, b.proc)
}

// doorFailoverCluster is a group of three in controller mode, each
// member with one door (doorFlag: --kafka-listen or --amqp-listen); it
// returns the brokers, their doors' addresses and a function reading the
// group from the controllers.
func doorFailoverCluster(t *testing.T, doorFlag string) ([]*failoverBroker, []string, func() *controller.Group) {
	t.Helper()
	o := ctrlClusterOpts{name: "FailoverCluster"}
	switch doorFlag {
	case "--kafka-listen":
		o.kafka = true
	case "--amqp-listen":
		o.amqp = true
	default:
		t.Fatalf("door %q", doorFlag)
	}
	c := startCtrlCluster(t, o)
	if o.kafka {
		return c.brokers, c.kafka, c.group
	}
	return c.brokers, c.amqp, c.group
}

// keelCommand is the command running the keel binary (this test binary)
// with args, in network namespace netns when it is not empty (ip netns
// exec executes the binary in place: the process is keel's).
func keelCommand(netns string, args ...string) *exec.Cmd {
	var cmd *exec.Cmd
	if netns == "" {
		cmd = exec.Command(os.Args[0], args...)
	} else {
		cmd = exec.Command("ip", append([]string{"netns", "exec", netns, os.Args[0]}, args...)...)
	}
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	return cmd
}
