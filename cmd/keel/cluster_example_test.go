package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/config"
)

// docRows returns the rows of the port tables of docs/cluster.md by their
// first cell: role, remoting, replication, HTTP, AMQP, Kafka ports.
func docRows(t *testing.T, doc string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| process") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 8 {
			t.Fatalf("docs/cluster.md: table row with %d cells: %q", len(cells), line)
		}
		if _, dup := rows[cells[0]]; dup {
			t.Fatalf("docs/cluster.md: two rows for %s", cells[0])
		}
		rows[cells[0]] = cells[2:]
	}
	return rows
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return port
}

// TestClusterExample keeps docs/cluster.md true to examples/cluster: each
// conf file loads without unknown keys and has its row in the page's port
// tables with the ports Keel derives from it (remoting, replication, HTTP,
// AMQP, Kafka; a slave's replication, AMQP and Kafka off); the page shows
// broker-a-0.conf as it is and starts every file. Then the layout runs:
// a NameServer and the four brokers of groups broker-a and broker-b from
// those files (listeners on loopback ports chosen at run time) register
// in their groups with each slave in sync, a topic created with -c lands
// on both groups; the group added as the page says (broker-c) registers
// too and keel topic update -c copies the topic to it.
func TestClusterExample(t *testing.T) {
	root := filepath.Join("..", "..")
	docBytes, err := os.ReadFile(filepath.Join(root, "docs", "cluster.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(docBytes)
	rows := docRows(t, doc)
	confs, err := filepath.Glob(filepath.Join(root, "examples", "cluster", "*.conf"))
	if err != nil || len(confs) != 6 {
		t.Fatalf("examples/cluster: %v %v, want six conf files", confs, err)
	}
	cfgs := map[string]*config.Broker{}
	for _, path := range confs {
		name := strings.TrimSuffix(filepath.Base(path), ".conf")
		b, unknown, err := config.Load(path)
		if err != nil || len(unknown) > 0 {
			t.Fatalf("%s: %v, unknown keys %v", path, err, unknown)
		}
		if err := b.DeriveDoorPorts(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		cfgs[name] = b
		want := []string{string(b.BrokerRole), strconv.Itoa(b.ListenPort), "–", portOf(t, b.HTTPListen), "off", "off"}
		if b.BrokerRole != config.Slave {
			want[2], want[4], want[5] = strconv.Itoa(b.HAPort()), portOf(t, b.AMQPListen), portOf(t, b.KafkaListen)
		}
		if got := rows[name]; !slices.Equal(got, want) {
			t.Errorf("docs/cluster.md row of %s: %v, the file gives %v", name, got, want)
		}
		if want := "keel broker -c examples/cluster/" + name + ".conf\n"; !strings.Contains(doc, want) {
			t.Errorf("docs/cluster.md does not start %s with %q", name, want)
		}
		if ns := rows["NameServer"]; len(ns) < 2 || b.NamesrvAddr != "127.0.0.1:"+ns[1] {
			t.Errorf("%s: namesrvAddr %s, the page's NameServer row %v", name, b.NamesrvAddr, ns)
		}
		delete(rows, name)
	}
	delete(rows, "NameServer")
	if len(rows) > 0 {
		t.Errorf("docs/cluster.md has rows without a conf file: %v", rows)
	}
	a0, err := os.ReadFile(filepath.Join(root, "examples", "cluster", "broker-a-0.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc, "```\n"+string(a0)+"```\n") {
		t.Errorf("docs/cluster.md does not show broker-a-0.conf as it is:\n%s", a0)
	}
	if t.Failed() {
		return
	}

	// Run it.
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0").await(t, "the NameServer to listen", listenRE)
	dir := t.TempDir()
	start := func(name string) {
		args := []string{"broker", "-c", filepath.Join(root, "examples", "cluster", name+".conf"), "-n", ns,
			"--data-dir", filepath.Join(dir, name), "--broker-listen", "127.0.0.1:0",
			"--http-listen", "", "--amqp-listen", "", "--kafka-listen", ""}
		if cfgs[name].BrokerRole != config.Slave {
			args = append(args, "--ha-listen", "127.0.0.1:0")
		}
		startRun(t, args...).await(t, name+"'s broker listener", brokerListenRE)
	}
	ac := admin.New(admin.Config{NamesrvAddrs: []string{ns}})
	defer ac.Close()
	registered := func(groups ...string) bool {
		bs, err := ac.Brokers(context.Background())
		if err != nil || len(bs) != 2*len(groups) {
			return false
		}
		for i, b := range bs {
			if b.Cluster != "DefaultCluster" || b.Name != groups[i/2] || b.ID != int64(i%2) {
				return false
			}
		}
		return true
	}
	inSync := func(groups int) func() bool {
		return func() bool {
			code, o, _ := keelCmd("cluster", "-n", ns)
			return code == 0 && strings.Count(o, "(cluster DefaultCluster): SYNC_MASTER, 2 of 2 copies in sync") == groups
		}
	}
	for _, name := range []string{"broker-a-0", "broker-a-1", "broker-b-0", "broker-b-1"} {
		start(name)
	}
	waitFor(t, "the four brokers to register in their groups", 30*time.Second, func() bool { return registered("broker-a", "broker-b") })
	waitFor(t, "keel cluster to show both groups in sync", 30*time.Second, inSync(2))
	if code, o, e := keelCmd("topic", "create", "-n", ns, "-c", "DefaultCluster", "--queues", "4", "Orders"); code != 0 {
		t.Fatalf("topic create -c: %d\n%s%s", code, o, e)
	}
	if q := topicQueues(t, ac, "Orders"); !sameQueues(q, map[string]int32{"broker-a": 4, "broker-b": 4}) {
		t.Fatalf("Orders: %v", q)
	}

	// Adding a group.
	start("broker-c-0")
	start("broker-c-1")
	waitFor(t, "the six brokers to register in their groups", 30*time.Second, func() bool { return registered("broker-a", "broker-b", "broker-c") })
	waitFor(t, "keel cluster to show three groups in sync", 30*time.Second, inSync(3))
	if code, o, e := keelCmd("topic", "update", "-n", ns, "-c", "DefaultCluster", "Orders"); code != 0 {
		t.Fatalf("topic update -c: %d\n%s%s", code, o, e)
	}
	if q := topicQueues(t, ac, "Orders"); !sameQueues(q, map[string]int32{"broker-a": 4, "broker-b": 4, "broker-c": 4}) {
		t.Fatalf("Orders after adding broker-c: %v", q)
	}
	waitFor(t, "the NameServer to route Orders to the three groups", 30*time.Second, func() bool {
		return slices.Equal(routeBrokers(t, ns, "Orders"), []string{"broker-a", "broker-b", "broker-c"})
	})
}
