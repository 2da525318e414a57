package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
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

// waitGroupsInSync waits until keel cluster shows both masters with their
// slave in sync (a SYNC_MASTER with minInSyncReplicas 2 takes sends then).
func waitGroupsInSync(t *testing.T, ns string) {
	t.Helper()
	waitFor(t, "keel cluster to show both groups in sync", 30*time.Second, func() bool {
		code, o, _ := keelCmd("cluster", "-n", ns)
		return code == 0 && strings.Count(o, "SYNC_MASTER, 2 of 2 copies in sync") == 2
	})
}

// received is what a consumer group member got: per message body, which
// member got it from which queue.
type received struct {
	mu   sync.Mutex
	gets map[string][]delivery
}

type delivery struct {
	member int
	queue  primitive.MessageQueue
}

func (r *received) count(body string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.gets[body])
}

func (r *received) all(bodies []string) bool {
	for _, b := range bodies {
		if r.count(b) == 0 {
			return false
		}
	}
	return true
}

// check reports whether each body was received exactly once, and which
// member consumed each queue (an error if two did).
func (r *received) check(bodies []string) (owners map[primitive.MessageQueue]int, members map[int]int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	owners, members = map[primitive.MessageQueue]int{}, map[int]int{}
	for _, b := range bodies {
		ds := r.gets[b]
		if len(ds) != 1 {
			return nil, nil, fmt.Errorf("%s received %d times: %+v", b, len(ds), ds)
		}
		d := ds[0]
		if o, ok := owners[d.queue]; ok && o != d.member {
			return nil, nil, fmt.Errorf("queue %v consumed by members %d and %d", d.queue, o, d.member)
		}
		owners[d.queue] = d.member
		members[d.member]++
	}
	return owners, members, nil
}

func sendAll(t *testing.T, p rocketmq.Producer, topic string, bodies []string) map[string]int {
	t.Helper()
	perBroker := map[string]int{}
	for _, b := range bodies {
		r, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(b)))
		if err != nil || r.Status != primitive.SendOK {
			t.Fatalf("send %s: %v %v", b, r, err)
		}
		perBroker[r.MessageQueue.BrokerName]++
	}
	return perBroker
}

func bodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

// TestOfficialClientAcrossGroups: the official RocketMQ Go client against
// real processes, two broker groups of a master and a slave under one
// NameServer. A topic created with keel topic create -c on both groups; the
// producer spreads its sends over both groups' queues; a push consumer
// group of two members divides the eight queues of both groups between
// them and receives every message exactly once. Then one group's master is
// killed with SIGKILL: every send goes on succeeding, on the other group
// (the client retries on another group; a producer started after the
// NameServer dropped the master never picks the masterless group, even
// without retries), keel cluster shows broker-b without its master and
// broker-a untouched, and the consumers receive every message sent after
// the kill.
func TestOfficialClientAcrossGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("runs five processes and the official client")
	}
	rlog.SetLogLevel("error")
	g := startTwoGroups(t, true)
	ns := g.namesrv
	waitGroupsInSync(t, ns)
	const topic = "Spread"
	if code, o, e := keelCmd("topic", "create", "-n", ns, "-c", "c", "--queues", "4", topic); code != 0 {
		t.Fatalf("topic create -c: %d\n%s%s", code, o, e)
	}
	waitFor(t, "the NameServer to route the topic to both groups", 30*time.Second, func() bool {
		return slices.Equal(routeBrokers(t, ns, topic), []string{"broker-a", "broker-b"})
	})

	p, err := producer.NewDefaultProducer(producer.WithNameServer([]string{ns}),
		producer.WithGroupName("spread-pg"), producer.WithInstanceName("spread-p"), producer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()

	got := &received{gets: map[string][]delivery{}}
	for m := 1; m <= 2; m++ {
		c, err := consumer.NewPushConsumer(consumer.WithNameServer([]string{ns}),
			consumer.WithGroupName("spread-cg"), consumer.WithInstance(fmt.Sprintf("spread-c%d", m)),
			consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
		if err != nil {
			t.Fatal(err)
		}
		err = c.Subscribe(topic, consumer.MessageSelector{Type: consumer.TAG, Expression: "*"},
			func(_ context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
				got.mu.Lock()
				defer got.mu.Unlock()
				for _, msg := range ms {
					got.gets[string(msg.Body)] = append(got.gets[string(msg.Body)], delivery{member: m, queue: *msg.Queue})
				}
				return consumer.ConsumeSuccess, nil
			})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer c.Shutdown()
	}

	// Rounds of one message per queue until a round shows the group
	// settled: each message once, both members consuming.
	for round := 0; ; round++ {
		if round == 20 {
			t.Fatal("the consumer group did not settle on one member per queue in 20 rounds")
		}
		probes := bodies(fmt.Sprintf("probe%d", round), 8)
		sendAll(t, p, topic, probes)
		waitFor(t, "the probes to arrive", 60*time.Second, func() bool { return got.all(probes) })
		if _, members, err := got.check(probes); err == nil && len(members) == 2 {
			break
		}
	}

	before := bodies("before", 200)
	perBroker := sendAll(t, p, topic, before)
	if perBroker["broker-a"] == 0 || perBroker["broker-b"] == 0 || perBroker["broker-a"]+perBroker["broker-b"] != len(before) {
		t.Fatalf("sends did not spread over both groups: %v", perBroker)
	}
	waitFor(t, "every message to be consumed", 60*time.Second, func() bool { return got.all(before) })
	owners, members, err := got.check(before)
	if err != nil {
		t.Fatal(err)
	}
	groupsConsumed := map[string]bool{}
	for q := range owners {
		groupsConsumed[q.BrokerName] = true
	}
	if len(owners) != 8 || len(groupsConsumed) != 2 || len(members) != 2 {
		t.Fatalf("consumed from queues %v (members %v), want the 8 queues of both groups divided between 2 members", owners, members)
	}
	t.Logf("sent %v; consumed per member %v", perBroker, members)

	// kill -9 broker-b's master.
	if err := g.masterCmd[1].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	after := bodies("after", 100)
	if perBroker := sendAll(t, p, topic, after); perBroker["broker-a"] != len(after) {
		t.Fatalf("sends after the kill: %v, want all on broker-a", perBroker)
	}
	// Once the NameServer has dropped the master, a new producer's route
	// leaves the group out: no send picks it, even without retries.
	ac := admin.New(admin.Config{NamesrvAddrs: []string{ns}})
	defer ac.Close()
	waitFor(t, "the NameServer to drop broker-b's master", 60*time.Second, func() bool {
		bs, err := ac.Brokers(context.Background())
		if err != nil {
			return false
		}
		for _, b := range bs {
			if b.Name == "broker-b" && b.ID == 0 {
				return false
			}
		}
		return true
	})
	// keel cluster: broker-a as it was, broker-b without its master.
	code, o, _ := keelCmd("cluster", "-n", ns)
	if code == 0 || !strings.Contains(o, "broker-a (cluster c): SYNC_MASTER, 2 of 2 copies in sync") ||
		!strings.Contains(o, "broker-b (cluster c): NO MASTER: the master is not registered with the NameServers") ||
		!regexp.MustCompile(`\n1\s+SLAVE\s+`+regexp.QuoteMeta(g.slave[1])+`\s`).MatchString(o) {
		t.Errorf("keel cluster with broker-b's master killed: exit %d\n%s", code, o)
	}
	p2, err := producer.NewDefaultProducer(producer.WithNameServer([]string{ns}),
		producer.WithGroupName("spread-pg2"), producer.WithInstanceName("spread-p2"), producer.WithRetry(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := p2.Start(); err != nil {
		t.Fatal(err)
	}
	defer p2.Shutdown()
	fresh := bodies("fresh", 40)
	if perBroker := sendAll(t, p2, topic, fresh); perBroker["broker-a"] != len(fresh) {
		t.Fatalf("sends of a producer started after the master left: %v, want all on broker-a", perBroker)
	}
	afterAll := append(after, fresh...)
	waitFor(t, "the messages sent after the kill to be consumed", 60*time.Second, func() bool { return got.all(afterAll) })
	// Nothing consumed before the kill came again.
	if _, _, err := got.check(before); err != nil {
		t.Fatalf("after the kill: %v", err)
	}
	dups := 0
	for _, b := range afterAll {
		dups += got.count(b) - 1
	}
	t.Logf("after the kill: %d messages sent, all consumed (%d delivered twice)", len(afterAll), dups)
}
