package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// startKeelProc runs the keel binary (this test binary) with args.
func startKeelProc(t *testing.T, args ...string) *controllerProc {
	t.Helper()
	return startKeelProcIn(t, "", args...)
}

// startKeelProcIn runs the keel binary with args in network namespace
// netns ("": this one).
func startKeelProcIn(t *testing.T, netns string, args ...string) *controllerProc {
	t.Helper()
	p := &controllerProc{logs: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = keelCommand(netns, args...)
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() { p.cmd.Process.Kill(); <-p.exited })
	return p
}

// failoverBroker is one broker process of the group and how to restart it.
type failoverBroker struct {
	proc      *controllerProc
	dir, addr string
	args      []string
	netns     string // its network namespace ("": the test's)
}

// ackedSend is one SEND_OK: where the broker said the message is.
type ackedSend struct {
	queue  int32
	offset int64
	at     time.Time
}

// rawSend sends one message with SEND_MESSAGE to the broker at addr; it
// reports the queue offset of a SEND_OK.
// routeSender sends raw SEND_MESSAGEs (rawSend) to the broker the
// NameServer's route names, one queue after another, dialling again when
// the route names another broker or a send failed.
type routeSender struct {
	ns            *remoting.Client // a NameServer
	topic, prefix string
	conn          *remoting.Client
	addr          string
	seq           int
}

// send sends the next body (prefix-NNNNNN). It returns the body, where it
// was stored and when the request left; err is why it was not.
func (r *routeSender) send(ctx context.Context) (body string, at ackedSend, addr string, start time.Time, err error) {
	_, write, err := bench.LookupRoute(ctx, r.ns, r.topic)
	if err != nil || len(write) == 0 {
		return "", at, "", start, fmt.Errorf("route: %v", err)
	}
	q := write[r.seq%len(write)]
	if r.conn == nil || r.addr != q.BrokerAddr {
		r.close()
		dctx, dcancel := context.WithTimeout(ctx, time.Second)
		r.conn, err = remoting.Dial(dctx, q.BrokerAddr, remoting.ClientConfig{})
		dcancel()
		if err != nil {
			r.conn = nil
			return "", at, "", start, err
		}
		r.addr = q.BrokerAddr
	}
	body = fmt.Sprintf("%s-%06d", r.prefix, r.seq)
	r.seq++
	start = time.Now()
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	off, err := rawSend(sctx, r.conn, r.topic, q.QueueID, body)
	scancel()
	if err != nil {
		r.close()
		return "", at, "", start, err
	}
	return body, ackedSend{queue: q.QueueID, offset: off, at: time.Now()}, q.BrokerAddr, start, nil
}

func (r *routeSender) close() {
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
}

func rawSend(ctx context.Context, cl *remoting.Client, topic string, queue int32, body string) (int64, error) {
	k := &remoting.SendKeysV1
	ext := map[string]string{}
	for i, v := range []string{"failover-producer", topic, "TBW102", "4", strconv.Itoa(int(queue)), "0",
		strconv.FormatInt(time.Now().UnixMilli(), 10), "0", "", "0", "false", "16", "false"} {
		ext[k[i]] = v
	}
	resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqSendMessage, ext, []byte(body)))
	if err != nil {
		return 0, err
	}
	if resp.Code != remoting.ResSuccess {
		return 0, fmt.Errorf("code %d: %s", resp.Code, resp.Remark)
	}
	if q, _ := strconv.Atoi(resp.Ext("queueId")); int32(q) != queue {
		return 0, fmt.Errorf("SEND_OK names queue %s, sent to %d", resp.Ext("queueId"), queue)
	}
	return strconv.ParseInt(resp.Ext("queueOffset"), 10, 64)
}

// TestControllerFailoverKill9 is automatic failover end to end, in real
// processes on loopback: three keel controller voters, one NameServer, a
// SYNC_MASTER group of three keel broker processes in controller mode,
// and a producer recording every SEND_OK. The master is killed with
// SIGKILL; a new master is elected, sends succeed again through the
// NameServer's route, and the old master, restarted, rejoins as a
// slave. Then the new master is paused (SIGSTOP): it is replaced the
// same way and, running again, learns the newer epoch and rejoins as a
// slave. Every acknowledged message is in every member's log at the
// queue offset its SEND_OK named, and no queue offset holds two.
func TestControllerFailoverKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	ports := reserveLoopbackPorts(t, 3+1+3*2+3+3)
	ctrl, nsAddr := ports[:3], ports[3]
	ctrlHTTP, brokerHTTP := ports[10:13], ports[13:16]
	confDir := t.TempDir()
	cconf := filepath.Join(confDir, "controller.conf")
	if err := os.WriteFile(cconf, []byte("controllerHeartBeatTimeoutMills=2000\nscanInactiveMasterInterval=200\ncontrollerFenceTimeoutMillis=1000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cps := []*controllerProc{startControllerProc(t, t.TempDir(), ctrl[0], "-c", cconf, "--bootstrap="+strings.Join(ctrl, ","), "--http-listen", ctrlHTTP[0])}
	for i := 1; i < 3; i++ {
		cps = append(cps, startControllerProc(t, t.TempDir(), ctrl[i], "-c", cconf, "--http-listen", ctrlHTTP[i]))
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i, p := range cps {
				t.Logf("controller %d log:\n%s", i, p.logs.String())
			}
		}
	})
	waitFor(t, "an acting controller leader", 30*time.Second, func() bool {
		st, ok := controllerStatus(t, ctrl)
		return ok && st.Acting && len(st.Voters) == 3
	})
	startKeelProc(t, "namesrv", "--namesrv-listen", nsAddr)

	bconf := filepath.Join(confDir, "broker.conf")
	if err := os.WriteFile(bconf, []byte("brokerClusterName=FailoverCluster\nbrokerName=broker-a\nbrokerRole=SYNC_MASTER\n"+
		"enableControllerMode=true\ncontrollerAddr="+strings.Join(ctrl, ";")+"\nminInSyncReplicas=2\nflushDiskType=SYNC_FLUSH\n"+
		"replicaAckTimeoutMillis=2000\nhttpListen=\nkafkaListen=\namqpListen=\nbrokerIP1=127.0.0.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	brokers := make([]*failoverBroker, 3)
	for i := range brokers {
		b := &failoverBroker{dir: t.TempDir(), addr: ports[4+2*i]}
		b.args = []string{"broker", "-c", bconf, "--data-dir", b.dir, "-n", nsAddr, "--broker-listen", b.addr, "--ha-listen", ports[5+2*i],
			"--http-listen", brokerHTTP[i]}
		b.proc = startKeelProc(t, b.args...)
		brokers[i] = b
	}
	group := groupFromControllers(t, ctrl, "broker-a")
	dump := func() { dumpBrokers(t, brokers) }
	g := waitMasterElected(t, brokers, group)
	firstEpoch, oldMasterID := g.MasterEpoch, g.MasterID
	oldMaster := brokerOf(t, brokers, g, oldMasterID)
	t.Logf("master: replica %d (broker %d) at epoch %d", oldMasterID, oldMaster, firstEpoch)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ns, err := remoting.Dial(ctx, nsAddr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	const topic = "FailoverT"
	mc, err := remoting.Dial(ctx, brokers[oldMaster].addr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := bench.CreateTopic(ctx, mc, topic, 4); err != nil {
		t.Fatal(err)
	}
	mc.Close()

	// The producer: the master from the NameServer's route, one queue
	// after another; every SEND_OK recorded.
	acked := map[string]ackedSend{}
	rs := &routeSender{ns: ns, topic: topic, prefix: "msg"}
	sendOne := func() (bool, string) {
		body, at, addr, _, err := rs.send(ctx)
		if err != nil {
			return false, err.Error()
		}
		acked[body] = at
		return true, addr
	}
	defer rs.close()
	waitFor(t, "the first SEND_OK", 20*time.Second, func() bool { ok, _ := sendOne(); return ok })
	for range 200 {
		if ok, why := sendOne(); !ok {
			dump()
			t.Fatalf("send before the kill failed: %s", why)
		}
	}
	before := len(acked)

	brokers[oldMaster].proc.cmd.Process.Signal(syscall.SIGKILL)
	<-brokers[oldMaster].proc.exited
	killed := time.Now()
	var lastErr string
	for {
		ok, why := sendOne()
		if ok && why != brokers[oldMaster].addr {
			break
		}
		lastErr = why
		if time.Since(killed) > 40*time.Second {
			dump()
			t.Fatalf("no SEND_OK within 40 s of the kill; last error: %s", lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	firstAfter := time.Since(killed)
	t.Logf("failover: %v from SIGKILL of the master to the first SEND_OK of the new master (last refusal: %s)", firstAfter.Round(time.Millisecond), lastErr)
	g = group()
	if g == nil || g.MasterID == oldMasterID || g.MasterID == 0 || g.MasterEpoch <= firstEpoch {
		t.Fatalf("controller after the failover: %+v", g)
	}
	newMasterID := g.MasterID
	newMaster := -1
	for i, b := range brokers {
		if g.Replicas[newMasterID].Addr == b.addr {
			newMaster = i
		}
	}
	for range 200 {
		if ok, why := sendOne(); !ok {
			dump()
			t.Fatalf("send after the failover failed: %s", why)
		}
	}

	// The old master restarts and rejoins as a slave of the new one.
	brokers[oldMaster].proc = startKeelProc(t, brokers[oldMaster].args...)
	waitFor(t, "the old master back in the in-sync set", 30*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID == newMasterID && len(g.InSync) == 3
	})
	for range 50 {
		if ok, why := sendOne(); !ok {
			dump()
			t.Fatalf("send after the rejoin failed: %s", why)
		}
	}
	if !strings.Contains(brokers[oldMaster].proc.logs.String(), `role=slave`) {
		dump()
		t.Fatal("the restarted old master did not start as a slave")
	}

	// A master that stops without dying (SIGSTOP) is replaced; when it
	// runs again it learns the newer epoch, stops acknowledging, and
	// rejoins as a slave of the newer master.
	secondEpoch := g.MasterEpoch
	brokers[newMaster].proc.cmd.Process.Signal(syscall.SIGSTOP)
	paused := time.Now()
	for {
		ok, why := sendOne()
		if ok && why != brokers[newMaster].addr {
			break
		}
		lastErr = why
		if time.Since(paused) > 40*time.Second {
			brokers[newMaster].proc.cmd.Process.Signal(syscall.SIGCONT)
			dump()
			t.Fatalf("no SEND_OK within 40 s of the SIGSTOP; last error: %s", lastErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("failover: %v from SIGSTOP of the master to the first SEND_OK of the next one", time.Since(paused).Round(time.Millisecond))
	g = group()
	if g == nil || g.MasterID == newMasterID || g.MasterEpoch <= secondEpoch {
		t.Fatalf("controller after the second failover: %+v", g)
	}
	thirdMasterID := g.MasterID
	brokers[newMaster].proc.cmd.Process.Signal(syscall.SIGCONT)
	waitFor(t, "the paused master back as a slave, in sync", 30*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID == thirdMasterID && len(g.InSync) == 3 &&
			strings.Contains(brokers[newMaster].proc.logs.String(), "from=master to=slave")
	})
	for range 50 {
		if ok, why := sendOne(); !ok {
			dump()
			t.Fatalf("send after the second rejoin failed: %s", why)
		}
	}
	// The metrics tell the story: the controllers committed the first
	// election and two automatic ones (the kill, the pause), none
	// unclean, and fenced the live replicas at each; the paused master is
	// a slave at the newest epoch, having promised the epoch it was
	// elected at (the election that replaced it fenced the others), after
	// three role changes (fenced, slave, master, slave).
	waitFor(t, "the controllers' and the brokers' /metrics to show the failovers", 20*time.Second, func() bool {
		var initial, elect, unclean, fenced, acting float64
		for _, a := range ctrlHTTP {
			m := scrapeSeries("http://" + a + "/metrics")
			if m == nil {
				return false
			}
			initial += m[`keel_controller_elections_total{kind="initial"}`]
			elect += m[`keel_controller_elections_total{kind="elect"}`]
			unclean += m[`keel_controller_elections_total{kind="unclean"}`]
			fenced += m["keel_controller_fenced_replicas_total"]
			acting += m["keel_controller_acting_leader"]
			if m[`keel_controller_group_master_epoch{group="broker-a"}`] != float64(g.MasterEpoch) {
				return false
			}
		}
		if initial != 1 || elect < 2 || unclean != 0 || fenced < 3+2+2 || acting != 1 {
			return false
		}
		m := scrapeSeries("http://" + brokerHTTP[newMaster] + "/metrics")
		return m != nil && m[`keel_controlled_role{role="slave"}`] == 1 && m["keel_controlled_master_epoch"] == float64(g.MasterEpoch) &&
			m["keel_controlled_promised_epoch"] == float64(secondEpoch) && m["keel_controlled_role_changes_total"] >= 3 &&
			m["keel_controlled_fences_total"] >= 2
	})
	t.Logf("%d acknowledged before the kill, %d in all", before, len(acked))
	if os.Getenv("KEEL_FAILOVER_LOGS") != "" {
		dump()
	}

	// No queue offset was acknowledged twice.
	seen := map[[2]int64]string{}
	for body, a := range acked {
		k := [2]int64{int64(a.queue), a.offset}
		if other, dup := seen[k]; dup {
			t.Fatalf("%s and %s were both acknowledged at queue %d offset %d", body, other, a.queue, a.offset)
		}
		seen[k] = body
	}
	// Every acknowledged message is in every member's log, where its
	// SEND_OK said, and every member's epoch history holds the last
	// master's epoch.
	for i := range brokers {
		brokers[i].proc.cmd.Process.Signal(syscall.SIGTERM)
		<-brokers[i].proc.exited
		checkAcked(t, brokers[i].dir, topic, acked)
		// (Stopping the master lets the controller elect another, so
		// the history may end with a later epoch.)
		h, err := replication.LoadHistory(vfs.OS{}, replication.EpochFile(brokers[i].dir))
		if err != nil || !slices.ContainsFunc(h, func(e replication.Epoch) bool { return e.Epoch == g.MasterEpoch }) {
			t.Errorf("broker %d: epoch history %v (%v) lacks the last master's epoch %d", i, h, err, g.MasterEpoch)
		}
	}
}

// checkAcked opens the stopped store in dir and checks that every
// acknowledged message is at the queue offset its SEND_OK named.
func checkAcked(t *testing.T, dir, topic string, acked map[string]ackedSend) {
	t.Helper()
	at := storedAt(t, dir, topic)
	for body, a := range acked {
		if got := at[[2]int64{int64(a.queue), a.offset}]; got != body {
			t.Errorf("%s: acknowledged %s at queue %d offset %d holds %q", dir, body, a.queue, a.offset, got)
		}
	}
	t.Logf("%s: %d messages, all %d acknowledged ones in place", dir, len(at), len(acked))
}

// storedAt opens the stopped store in dir and returns the body of every
// message of topic's four queues by (queue, queue offset).
func storedAt(t *testing.T, dir, topic string) map[[2]int64]string {
	t.Helper()
	cfg := config.Default()
	cfg.StorePathRootDir = dir
	sc := storeConfig(cfg, &parts{cfg: cfg, log: slog.New(slog.DiscardHandler)})
	sc.ExternalReplication, sc.Replica = false, false
	st, err := store.Open(sc)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	defer st.Close()
	at := map[[2]int64]string{}
	for q := int32(0); q < 4; q++ {
		for off := int64(0); off < st.MaxOffset(topic, q); {
			r, err := st.GetMessage(topic, q, off, 64, 1<<20, nil)
			if err != nil || len(r.Records) == 0 {
				t.Fatalf("%s: read queue %d at %d: %v", dir, q, off, err)
			}
			for _, rec := range r.Records {
				v := message.View(rec)
				at[[2]int64{int64(q), v.QueueOffset()}] = string(v.Body())
				off = v.QueueOffset() + 1
			}
			r.Release()
		}
	}
	return at
}

// groupFromControllers returns a function that reads group name from the
// controllers at addrs (nil while they do not answer or hold it).
func groupFromControllers(t *testing.T, addrs []string, name string) func() *controller.Group {
	return func() *controller.Group {
		st, ok := controllerStatus(t, addrs)
		if !ok {
			return nil
		}
		for _, g := range st.Groups {
			if g.Name == name {
				return g
			}
		}
		return nil
	}
}

// dumpBrokers logs every broker's log (a failing test's context).
func dumpBrokers(t *testing.T, brokers []*failoverBroker) {
	for i, b := range brokers {
		t.Logf("broker %d (%s) log:\n%s", i, b.addr, b.proc.logs.String())
	}
}

// waitMasterElected waits until the group has a master and all three
// members in its in-sync set, and returns it.
func waitMasterElected(t *testing.T, brokers []*failoverBroker, group func() *controller.Group) *controller.Group {
	t.Helper()
	var g *controller.Group
	waitOrDump(t, brokers, "a master elected and all three in sync", 40*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID != 0 && len(g.InSync) == 3
	})
	return g
}

// waitOrDump is waitFor that logs every broker's log before failing (a
// set-up that fails says why).
func waitOrDump(t *testing.T, brokers []*failoverBroker, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			dumpBrokers(t, brokers)
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// brokerOf is the index in brokers of replica id of g.
func brokerOf(t *testing.T, brokers []*failoverBroker, g *controller.Group, id controller.ReplicaID) int {
	t.Helper()
	for i, b := range brokers {
		if r := g.Replicas[id]; r != nil && r.Addr == b.addr {
			return i
		}
	}
	dumpBrokers(t, brokers)
	t.Fatalf("replica %d (%+v) is none of the brokers", id, g.Replicas[id])
	return -1
}
