package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/remoting"
)

// A cluster of two broker groups (broker-a and broker-b of cluster c), each
// a SYNC_MASTER and its SLAVE, under one NameServer, on loopback ports
// chosen at run time with the AMQP and Kafka doors off.

type twoGroups struct {
	namesrv   string
	names     [2]string
	master    [2]string    // remoting addresses
	slave     [2]string    // remoting addresses
	masterCmd [2]*exec.Cmd // the masters as child processes (killable), if asked for
	slaveHTTP string       // broker-a's slave serves HTTP (the console)
}

// startTwoGroups starts the cluster and returns once all four brokers are
// registered; with childMasters the masters are child processes.
func startTwoGroups(t *testing.T, childMasters bool) *twoGroups {
	t.Helper()
	g := &twoGroups{names: [2]string{"broker-a", "broker-b"}}
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	g.namesrv = ns.await(t, "the NameServer to listen", listenRE)
	dir := t.TempDir()
	for i, name := range g.names {
		common := "brokerClusterName=c\nbrokerName=" + name + "\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n" +
			"minInSyncReplicas=2\nreplicaAckTimeoutMillis=1000\n"
		margs := []string{"-n", g.namesrv, "-c", writeConf(t, common+"brokerRole=SYNC_MASTER\nbrokerId=0\n"),
			"--data-dir", filepath.Join(dir, name+"-0"), "--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0",
			"--http-listen", "", "--amqp-listen", "", "--kafka-listen", ""}
		var ha string
		if childMasters {
			cmd, logs := startBrokerProc(t, margs...)
			g.masterCmd[i] = cmd
			ha = awaitLog(t, name+"'s master HA listener", logs, haListenRE)
			g.master[i] = awaitLog(t, name+"'s master broker listener", logs, brokerListenRE)
		} else {
			m := startRun(t, append([]string{"broker"}, margs...)...)
			ha = m.await(t, name+"'s master HA listener", haListenRE)
			g.master[i] = m.await(t, name+"'s master broker listener", brokerListenRE)
		}
		httpListen := ""
		if i == 0 {
			httpListen = "127.0.0.1:0"
		}
		s := startRun(t, "broker", "-n", g.namesrv, "-c", writeConf(t, common+"brokerRole=SLAVE\nbrokerId=1\nhaMasterAddress="+ha+"\n"),
			"--data-dir", filepath.Join(dir, name+"-1"), "--broker-listen", "127.0.0.1:0",
			"--http-listen", httpListen, "--amqp-listen", "", "--kafka-listen", "")
		g.slave[i] = s.await(t, name+"'s slave broker listener", brokerListenRE)
		if i == 0 {
			g.slaveHTTP = s.await(t, "the slave's HTTP listener", httpListenRE)
		}
	}
	ac := admin.New(admin.Config{NamesrvAddrs: []string{g.namesrv}})
	defer ac.Close()
	waitFor(t, "the four brokers to register", 30*time.Second, func() bool {
		bs, err := ac.Brokers(context.Background())
		return err == nil && len(bs) == 4
	})
	return g
}

// routeBrokers returns the broker groups the NameServer routes topic to
// (nil when it has no route).
func routeBrokers(t *testing.T, ns, topic string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, ns, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Code != remoting.ResSuccess {
		return nil
	}
	var route struct {
		QueueDatas []struct {
			BrokerName string `json:"brokerName"`
		} `json:"queueDatas"`
	}
	if err := json.Unmarshal(resp.Body, &route); err != nil {
		t.Fatalf("route of %s: %v: %s", topic, err, resp.Body)
	}
	var out []string
	for _, q := range route.QueueDatas {
		out = append(out, q.BrokerName)
	}
	slices.Sort(out)
	return out
}

// topicQueues returns, per broker group hosting topic, its write queue
// count.
func topicQueues(t *testing.T, ac *admin.Client, topic string) map[string]int32 {
	t.Helper()
	tp, err := ac.Topic(context.Background(), topic)
	if err != nil {
		t.Fatalf("topic %s: %v", topic, err)
	}
	out := map[string]int32{}
	for _, b := range tp.Brokers {
		out[b.Broker] = b.WriteQueues
	}
	return out
}

func sameQueues(got, want map[string]int32) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestTopicClusterAndBrokerAddr: keel topic create/update/delete with -c
// CLUSTER act on every master of the cluster and with -b on the one master
// at that address, as mqadmin's do; the NameServer routes follow; a slave's
// address, an unknown cluster and both flags at once are refused. keel
// cluster and the console list both groups with their members.
func TestTopicClusterAndBrokerAddr(t *testing.T) {
	g := startTwoGroups(t, false)
	ns := g.namesrv
	ac := admin.New(admin.Config{NamesrvAddrs: []string{ns}})
	defer ac.Close()

	// keel cluster: both groups, each with its master and slave.
	var out string
	waitFor(t, "keel cluster to show both groups in sync", 30*time.Second, func() bool {
		code, o, _ := keelCmd("cluster", "-n", ns)
		out = o
		return code == 0 && strings.Count(o, "SYNC_MASTER, 2 of 2 copies in sync") == 2
	})
	for i, name := range g.names {
		for _, re := range []*regexp.Regexp{
			regexp.MustCompile(regexp.QuoteMeta(name) + ` \(cluster c\): SYNC_MASTER, 2 of 2 copies in sync`),
			regexp.MustCompile(`\n0\s+SYNC_MASTER\s+` + regexp.QuoteMeta(g.master[i]) + `\s`),
			regexp.MustCompile(`\n1\s+SLAVE\s+` + regexp.QuoteMeta(g.slave[i]) + `\s.*following `),
		} {
			if !re.MatchString(out) {
				t.Errorf("keel cluster does not match %v:\n%s", re, out)
			}
		}
	}
	// The console's replication view: the same two groups of two.
	resp, err := http.Get("http://" + g.slaveHTTP + "/api/replication")
	if err != nil {
		t.Fatal(err)
	}
	var gs []admin.BrokerGroup
	err = json.NewDecoder(resp.Body).Decode(&gs)
	resp.Body.Close()
	if err != nil || len(gs) != 2 {
		t.Fatalf("console /api/replication: %v %+v", err, gs)
	}
	for i, bg := range gs {
		if bg.Name != g.names[i] || len(bg.Members) != 2 || bg.Members[0].Addr != g.master[i] || bg.Members[1].Addr != g.slave[i] {
			t.Errorf("console group %d: %+v", i, bg)
		}
	}

	both := []string{"broker-a", "broker-b"}
	mustRun := func(args ...string) string {
		t.Helper()
		code, o, e := keelCmd(append(args, "-n", ns)...)
		if code != 0 {
			t.Fatalf("keel %v: exit %d\n%s%s", args, code, o, e)
		}
		return o
	}
	mustFail := func(want string, args ...string) {
		t.Helper()
		code, o, e := keelCmd(append(args, "-n", ns)...)
		if code == 0 || !strings.Contains(e, want) {
			t.Fatalf("keel %v: exit %d, want an error saying %q\n%s%s", args, code, want, o, e)
		}
	}

	// -c: every master of the cluster.
	mustRun("topic", "create", "-c", "c", "--queues", "4", "T1")
	if q := topicQueues(t, ac, "T1"); !sameQueues(q, map[string]int32{"broker-a": 4, "broker-b": 4}) {
		t.Fatalf("T1 after create -c: %v", q)
	}
	waitFor(t, "the NameServer to route T1 to both groups", 30*time.Second, func() bool {
		return slices.Equal(routeBrokers(t, ns, "T1"), both)
	})
	mustFail("already exists", "topic", "create", "-c", "c", "T1")
	mustFail(`cluster "nosuch" has no master`, "topic", "create", "-c", "nosuch", "T2")
	mustFail("a slave", "topic", "create", "-b", g.slave[0], "T2")
	mustFail("no broker is registered at 127.0.0.1:1", "topic", "create", "-b", "127.0.0.1:1", "T2")
	mustFail("none of the others can be", "topic", "create", "-c", "c", "-b", g.master[0], "T2")

	// -b: the one master; update -c then copies it to the other group.
	mustRun("topic", "create", "-b", g.master[1], "--queues", "2", "T2")
	if q := topicQueues(t, ac, "T2"); !sameQueues(q, map[string]int32{"broker-b": 2}) {
		t.Fatalf("T2 after create -b: %v", q)
	}
	mustRun("topic", "update", "-c", "c", "T2")
	if q := topicQueues(t, ac, "T2"); !sameQueues(q, map[string]int32{"broker-a": 2, "broker-b": 2}) {
		t.Fatalf("T2 after update -c without a change: %v", q)
	}
	mustRun("topic", "update", "-c", "c", "--queues", "6", "T1")
	if q := topicQueues(t, ac, "T1"); !sameQueues(q, map[string]int32{"broker-a": 6, "broker-b": 6}) {
		t.Fatalf("T1 after update -c --queues 6: %v", q)
	}
	mustRun("topic", "update", "-b", g.master[0], "--queues", "3", "T1")
	if q := topicQueues(t, ac, "T1"); !sameQueues(q, map[string]int32{"broker-a": 3, "broker-b": 6}) {
		t.Fatalf("T1 after update -b --queues 3: %v", q)
	}

	// delete -b: that group only, in the broker and in the route.
	mustRun("topic", "delete", "-b", g.master[0], "T1")
	if q := topicQueues(t, ac, "T1"); !sameQueues(q, map[string]int32{"broker-b": 6}) {
		t.Fatalf("T1 after delete -b: %v", q)
	}
	if r := routeBrokers(t, ns, "T1"); !slices.Equal(r, []string{"broker-b"}) {
		t.Fatalf("T1's route after delete -b: %v", r)
	}
	mustFail("not found", "topic", "delete", "-b", g.master[0], "T1")
	// delete -c: the rest, and the route with it.
	mustRun("topic", "delete", "-c", "c", "T1")
	if _, err := ac.Topic(context.Background(), "T1"); err == nil {
		t.Fatal("T1 still exists after delete -c")
	}
	if r := routeBrokers(t, ns, "T1"); r != nil {
		t.Fatalf("T1's route after delete -c: %v", r)
	}
	if r := routeBrokers(t, ns, "T2"); !slices.Equal(r, both) {
		t.Fatalf("T2's route after deleting T1: %v", r)
	}
}
