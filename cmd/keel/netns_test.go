package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// The nodes of a cluster, by name: the namespaces and addresses of a
// netnsLayout are keyed by them.
const (
	namesrvNode = "ns"
	clientNode  = "cl" // the test's own namespace: the clients run there
)

func ctrlNode(i int) string          { return fmt.Sprintf("c%d", i) }
func brokerNode(group, i int) string { return fmt.Sprintf("b%d%d", group, i) }

// netnsLayout is a set of network namespaces a test created: one per
// node, each with one veth pair (eth0 inside, port Ports[node] in the
// bridge namespace) to a bridge in a namespace of its own, and an address
// of one /24 on eth0 (no address in the root namespace). Every namespace
// belongs to one run, so the subnet can be the same in every run.
type netnsLayout struct {
	Bridge string            // the bridge's namespace
	Subnet string            // the first three bytes of the /24, "10.231.0"
	Hosts  map[string]int    // node -> its host number in the subnet
	NS     map[string]string // node -> its namespace
	Ports  map[string]string // node -> its veth's end on the bridge
}

func (l *netnsLayout) ns(node string) string { return l.NS[node] }
func (l *netnsLayout) ip(node string) string { return fmt.Sprintf("%s.%d", l.Subnet, l.Hosts[node]) }

// ipCmd runs ip (or tc, bridge: argv[0]) with args and returns its error
// with its output.
func ipCmd(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// historyNodes are the nodes of the history test's cluster and its
// clients.
func historyNodes() []string {
	return []string{ctrlNode(0), ctrlNode(1), ctrlNode(2), namesrvNode, brokerNode(0, 0), brokerNode(0, 1), brokerNode(0, 2), clientNode}
}

// newNetnsLayout creates the namespaces of nodes, the bridge and the
// links (everything named after this process, so that runs side by side
// do not meet) and registers their removal with t.Cleanup: every process
// left in them is killed, then they are deleted. It returns an error
// naming what failed when the machine cannot do it (not root, no ip
// netns, no veth, no bridge, no htb).
func newNetnsLayout(t *testing.T, nodes []string) (*netnsLayout, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("not root (euid %d)", os.Geteuid())
	}
	for _, tool := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("no %s command: %v", tool, err)
		}
	}
	pre := fmt.Sprintf("kh%d", os.Getpid())
	l := &netnsLayout{Bridge: pre + "-br", Subnet: "10.231.0", Hosts: map[string]int{}, NS: map[string]string{}, Ports: map[string]string{}}
	var made []string
	t.Cleanup(func() { removeNetns(t, made) })
	add := func(ns string) error {
		if err := ipCmd("ip", "netns", "add", ns); err != nil {
			return err
		}
		made = append(made, ns)
		return ipCmd("ip", "-n", ns, "link", "set", "lo", "up")
	}
	if err := add(l.Bridge); err != nil {
		return nil, err
	}
	if err := ipCmd("ip", "-n", l.Bridge, "link", "add", "br0", "type", "bridge"); err != nil {
		return nil, err
	}
	if err := ipCmd("ip", "-n", l.Bridge, "link", "set", "br0", "up"); err != nil {
		return nil, err
	}
	for i, node := range nodes {
		ns, port := pre+"-"+node, "v-"+node
		l.NS[node], l.Ports[node], l.Hosts[node] = ns, port, 10+i
		if err := add(ns); err != nil {
			return nil, err
		}
		for _, argv := range [][]string{
			{"ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", l.Bridge},
			{"ip", "-n", ns, "addr", "add", l.ip(node) + "/24", "dev", "eth0"},
			{"ip", "-n", ns, "link", "set", "eth0", "up"},
			{"ip", "-n", l.Bridge, "link", "set", port, "master", "br0"},
			{"ip", "-n", l.Bridge, "link", "set", port, "up"},
		} {
			if err := ipCmd(argv...); err != nil {
				return nil, err
			}
		}
	}
	// The slow link's qdisc, tried once here so that a machine without it
	// skips rather than fails in the middle of a run.
	if err := l.slow(nodes[0], true); err != nil {
		return nil, err
	}
	if err := l.slow(nodes[0], false); err != nil {
		return nil, err
	}
	return l, nil
}

// removeNetns kills every process left in the namespaces and deletes
// them (the bridge's last, with its ports).
func removeNetns(t *testing.T, nss []string) {
	for _, ns := range slices.Backward(nss) {
		out, _ := exec.Command("ip", "netns", "pids", ns).Output()
		for _, f := range strings.Fields(string(out)) {
			exec.Command("kill", "-9", f).Run()
		}
		// A process killed a moment ago may still hold the namespace:
		// ip netns del only unmounts the name, the kernel frees it with
		// its last process.
		if err := ipCmd("ip", "netns", "del", ns); err != nil {
			t.Errorf("removing network namespace %s: %v", ns, err)
		}
	}
}

// linkDown sets node's only link down (or up): it is cut from every
// other node, both ways.
func (l *netnsLayout) linkDown(node string, down bool) error {
	state := "up"
	if down {
		state = "down"
	}
	return ipCmd("ip", "-n", l.ns(node), "link", "set", "eth0", state)
}

// partition cuts (or heals) every link between node a and the nodes of
// bs, both ways, and no other: a blackhole route to the other side's
// address, in a's namespace and in each of bs's.
func (l *netnsLayout) partition(a string, bs []string, cut bool) error {
	verb := "add"
	if !cut {
		verb = "del"
	}
	for _, b := range bs {
		if err := ipCmd("ip", "-n", l.ns(a), "route", verb, "blackhole", l.ip(b)+"/32"); err != nil {
			return err
		}
		if err := ipCmd("ip", "-n", l.ns(b), "route", verb, "blackhole", l.ip(a)+"/32"); err != nil {
			return err
		}
	}
	return nil
}

// slowRate is the slow link's rate, each way.
const slowRate = "1mbit"

// slow limits node's link to slowRate each way (or lifts the limit): an
// htb qdisc on its eth0 (what it sends) and on its port of the bridge
// (what it receives).
func (l *netnsLayout) slow(node string, on bool) error {
	for _, side := range [][2]string{{l.ns(node), "eth0"}, {l.Bridge, l.Ports[node]}} {
		argvs := [][]string{{"tc", "-n", side[0], "qdisc", "del", "dev", side[1], "root"}}
		if on {
			argvs = [][]string{
				{"tc", "-n", side[0], "qdisc", "add", "dev", side[1], "root", "handle", "1:", "htb", "default", "10"},
				{"tc", "-n", side[0], "class", "add", "dev", side[1], "parent", "1:", "classid", "1:10", "htb", "rate", slowRate, "burst", "8k"},
			}
		}
		for _, argv := range argvs {
			if err := ipCmd(argv...); err != nil {
				return err
			}
		}
	}
	return nil
}

// netnsLayoutEnv carries the layout to the test binary run inside the
// clients' namespace.
const netnsLayoutEnv = "KEEL_NETNS_LAYOUT"

// runInClientNetns runs test name of this binary again inside l's client
// namespace, with l in its environment, and fails t if it fails; the
// child's output is logged line by line as it comes.
func runInClientNetns(t *testing.T, l *netnsLayout, name string) {
	t.Helper()
	js, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	timeout := 30 * time.Minute
	if d, ok := t.Deadline(); ok {
		timeout = time.Until(d) - 30*time.Second
	}
	cmd := exec.Command("ip", "netns", "exec", l.ns(clientNode), os.Args[0], "-test.run=^"+name+"$", "-test.v",
		"-test.timeout="+timeout.String())
	cmd.Env = append(os.Environ(), netnsLayoutEnv+"="+string(js))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	passed := false
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "--- PASS: "+name+" ") {
			passed = true
		}
		t.Log("netns: " + line)
	}
	if err := cmd.Wait(); err != nil || !passed {
		t.Fatalf("the run in network namespace %s: %v (passed: %v)", l.ns(clientNode), err, passed)
	}
}

// childNetnsLayout is the layout a parent passed (nil: this is no child).
func childNetnsLayout(t *testing.T) *netnsLayout {
	js := os.Getenv(netnsLayoutEnv)
	if js == "" {
		return nil
	}
	var l netnsLayout
	if err := json.Unmarshal([]byte(js), &l); err != nil {
		t.Fatalf("%s=%q: %v", netnsLayoutEnv, js, err)
	}
	return &l
}

// relayEnv makes the test binary a TCP relay ("listen=target"): the AMQP
// door of a broker in a namespace listens on the namespace's loopback
// (guest, the only account without ACL, logs in from loopback only) and
// a relay in the same namespace forwards what reaches the namespace's
// address to it, so the AMQP traffic crosses the node's link.
const relayEnv = "KEEL_TEST_RELAY"

// startRelayIn starts a relay in namespace netns from listen to target.
func startRelayIn(t *testing.T, netns, listen, target string) {
	t.Helper()
	p := &controllerProc{logs: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command("ip", "netns", "exec", netns, os.Args[0])
	p.cmd.Env = append(os.Environ(), relayEnv+"="+listen+"="+target)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
}

func runRelay(spec string) {
	listen, target, ok := strings.Cut(spec, "=")
	if !ok {
		fmt.Fprintf(os.Stderr, "%s=%q: want listen=target\n", relayEnv, spec)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(1)
		}
		go func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", target, time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			go func() { io.Copy(up, c); up.Close() }()
			io.Copy(c, up)
		}()
	}
}
