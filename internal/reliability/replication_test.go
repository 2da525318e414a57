package reliability

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store"
)

// proc is one keel process of a replicated group (NameServer, master or
// slave) on loopback ports chosen at run time.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	log    string
	exited chan error
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, log: filepath.Join(t.TempDir(), name+".log"), exited: make(chan error, 1)}
	f, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if len(args) > 0 && args[0] == "broker" {
		// No AMQP or Kafka listener on its default port: tests of other
		// packages run at the same time.
		args = append(args, "--amqp-listen", "", "--kafka-listen", "")
	}
	p.cmd = exec.Command(keelBinary(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = f, f
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() { p.signal(syscall.SIGKILL) })
	return p
}

func (p *proc) logs() string { b, _ := os.ReadFile(p.log); return string(b) }

// await waits for re in the log and returns its first group.
func (p *proc) await(re *regexp.Regexp) string {
	p.t.Helper()
	var m []string
	if !poll(30*time.Second, func() bool { m = re.FindStringSubmatch(p.logs()); return m != nil }) {
		p.t.Fatalf("%s not in the log:\n%s", re, tail(p.logs(), 4000))
	}
	return m[1]
}

// signal sends sig and waits for the exit (idempotent).
func (p *proc) signal(sig syscall.Signal) error {
	if p.cmd == nil {
		return nil
	}
	p.cmd.Process.Signal(sig)
	var err error
	select {
	case err = <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		err = <-p.exited
		p.t.Errorf("did not exit after %v:\n%s", sig, tail(p.logs(), 4000))
	}
	p.cmd = nil
	return err
}

var haListenRE = regexp.MustCompile(`msg="replication listening" component=replication addr=(\S+)`)

type group struct {
	ns, master, slave              *proc
	nsAddr, masterAddr, slaveAddr  string
	slaveDir, slaveConf, masterDir string
	masterConf, haAddr             string
}

// restartMaster starts the master again on its data directory and
// addresses.
func (g *group) restartMaster(t *testing.T) {
	g.master = startProc(t, "master-2", "broker", "-n", g.nsAddr, "-c", g.masterConf, "--data-dir", g.masterDir,
		"--broker-listen", g.masterAddr, "--ha-listen", g.haAddr, "--http-listen", "")
	g.master.await(haListenRE)
}

// restartSlave starts the slave again on its data directory.
func (g *group) restartSlave(t *testing.T) {
	g.slave = startProc(t, "slave-2", "broker", "-n", g.nsAddr, "-c", g.slaveConf, "--data-dir", g.slaveDir,
		"--broker-listen", g.slaveAddr, "--http-listen", "")
	g.slave.await(brListenRE)
}

// startGroup starts a NameServer, a SYNC_MASTER and (if slave) its SLAVE
// as separate keel processes.
func startGroup(t *testing.T, withSlave bool) *group {
	g := &group{}
	g.ns = startProc(t, "namesrv", "namesrv", "--namesrv-listen", "127.0.0.1:0")
	g.nsAddr = g.ns.await(nsListenRE)
	common := "brokerClusterName=c\nbrokerName=broker-a\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n" +
		"minInSyncReplicas=2\nreplicaAckTimeoutMillis=1000\n"
	dir := t.TempDir()
	mconf := filepath.Join(dir, "master.conf")
	os.WriteFile(mconf, []byte(common+"brokerRole=SYNC_MASTER\nbrokerId=0\n"), 0o600)
	g.masterDir = filepath.Join(dir, "master")
	g.master = startProc(t, "master", "broker", "-n", g.nsAddr, "-c", mconf, "--data-dir", g.masterDir,
		"--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--http-listen", "")
	ha := g.master.await(haListenRE)
	g.masterAddr = g.master.await(brListenRE)
	g.masterConf, g.haAddr = mconf, ha
	if withSlave {
		g.slaveConf = filepath.Join(dir, "slave.conf")
		os.WriteFile(g.slaveConf, []byte(common+"brokerRole=SLAVE\nbrokerId=1\nhaMasterAddress="+ha+"\n"), 0o600)
		g.slaveDir = filepath.Join(dir, "slave")
		g.slave = startProc(t, "slave", "broker", "-n", g.nsAddr, "-c", g.slaveConf, "--data-dir", g.slaveDir,
			"--broker-listen", "127.0.0.1:0", "--http-listen", "")
		g.slaveAddr = g.slave.await(brListenRE)
	}
	return g
}

func sendOne(addr, topic string, queue int32, body string) (*remoting.Command, error) {
	return invoke(addr, remoting.ReqSendMessage, sendExt(topic, queue, ""), []byte(body))
}

// TestSyncMasterKillKeepsAcknowledgedOnSlave: a NameServer, a SYNC_MASTER
// and a SLAVE as three processes; the slave registers under brokerId 1 and
// refuses sends; every send the master answers SEND_OK is on the slave
// after the master is killed with SIGKILL, intact, read from the slave's
// data directory. Then both restart: the master begins a new epoch and the
// slave follows it.
func TestSyncMasterKillKeepsAcknowledgedOnSlave(t *testing.T) {
	g := startGroup(t, true)
	// The group in the route: both ids of broker-a.
	waitFor(t, 30*time.Second, "master and slave registered", func() bool {
		resp, err := invoke(g.nsAddr, remoting.ReqGetBrokerClusterInfo, nil, nil)
		return err == nil && resp.Code == remoting.ResSuccess &&
			regexp.MustCompile(`"0":"`+regexp.QuoteMeta(g.masterAddr)+`"`).Match(resp.Body) &&
			regexp.MustCompile(`"1":"`+regexp.QuoteMeta(g.slaveAddr)+`"`).Match(resp.Body)
	})
	waitFor(t, 30*time.Second, "the runtime info to show the slave in sync", func() bool {
		resp, err := invoke(g.masterAddr, remoting.ReqGetBrokerRuntimeInfo, nil, nil)
		return err == nil && resp.Code == remoting.ResSuccess &&
			regexp.MustCompile(`"keelReplicationInSyncReplicas":"2"`).Match(resp.Body)
	})
	resp, err := sendOne(g.slaveAddr, "R", 0, "to the slave")
	if err != nil || resp.Code != remoting.ResServiceNotAvailable {
		t.Fatalf("send to the slave: %v %v", resp, err)
	}
	waitFor(t, 30*time.Second, "the master to accept sends", func() bool {
		resp, err := sendOne(g.masterAddr, "R", 0, "probe")
		return err == nil && resp.Code == remoting.ResSuccess
	})

	type ackd struct {
		queue int32
		qo    int64
		body  string
	}
	var mu sync.Mutex
	var acked []ackd
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				q := int32(w % 2)
				body := fmt.Sprintf("w%d-%d", w, i)
				resp, err := sendOne(g.masterAddr, "R", q, body)
				if err != nil {
					return // the master is gone
				}
				if resp.Code != remoting.ResSuccess {
					continue
				}
				qo, _ := strconv.ParseInt(resp.ExtFields["queueOffset"], 10, 64)
				mu.Lock()
				acked = append(acked, ackd{q, qo, body})
				mu.Unlock()
			}
		}()
	}
	waitFor(t, 60*time.Second, "200 acknowledged sends", func() bool { mu.Lock(); defer mu.Unlock(); return len(acked) >= 200 })
	g.master.signal(syscall.SIGKILL)
	close(stop)
	wg.Wait()
	if err := g.slave.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("slave exit: %v\n%s", err, tail(g.slave.logs(), 4000))
	}

	cfg := store.DefaultConfig(g.slaveDir)
	cfg.CommitLogSegmentBytes = 16 << 20
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mu.Lock()
	defer mu.Unlock()
	for _, a := range acked {
		var r *store.GetResult
		if !poll(10*time.Second, func() bool {
			r, err = st.GetMessage("R", a.queue, a.qo, 1, 1<<20, nil)
			return err == nil && r.Status == store.Found
		}) {
			t.Fatalf("acknowledged %s (queue %d offset %d) not on the slave: %v %v", a.body, a.queue, a.qo, r, err)
		}
		if got := string(message.View(r.Records[0]).Body()); got != a.body {
			t.Fatalf("queue %d offset %d on the slave holds %q, acknowledged %q", a.queue, a.qo, got, a.body)
		}
		r.Release()
	}
	t.Logf("%d acknowledged sends, all on the slave", len(acked))
	st.Close()
	if out, err := exec.Command(keelBinary(t), "check", "-c", g.slaveConf, "--data-dir", g.slaveDir).CombinedOutput(); err != nil {
		t.Fatalf("keel check of the slave: %v\n%s", err, out)
	}

	g.restartMaster(t)
	g.restartSlave(t)
	waitFor(t, 30*time.Second, "SEND_OK after the restarts", func() bool {
		resp, err := sendOne(g.masterAddr, "R", 0, "after restart")
		return err == nil && resp.Code == remoting.ResSuccess
	})
	epochs, err := os.ReadFile(filepath.Join(g.slaveDir, "replication", "epochs"))
	if err != nil || !regexp.MustCompile(`(?m)^1 0\n2 \d+\n$`).Match(epochs) {
		t.Fatalf("slave epochs after the master's restart: %q %v", epochs, err)
	}
}

// TestSyncMasterWithoutSlaveNeverSendOK: a SYNC_MASTER answers no send
// SEND_OK while its slave is not there: never started (refused,
// IN_SYNC_REPLICAS_NOT_ENOUGH), frozen with SIGSTOP (FLUSH_SLAVE_TIMEOUT,
// then refused once it left the in-sync set), or stopped. Its slave knows
// the master only from the NameServer.
func TestSyncMasterWithoutSlaveNeverSendOK(t *testing.T) {
	g := startGroup(t, false)
	notOK := func(what string, n int) {
		t.Helper()
		for i := range n {
			resp, err := sendOne(g.masterAddr, "R", 0, fmt.Sprint(what, i))
			if err != nil {
				t.Fatal(err)
			}
			refused := resp.Code == remoting.ResSystemError && regexp.MustCompile(`IN_SYNC_REPLICAS_NOT_ENOUGH`).MatchString(resp.Remark)
			if !refused && resp.Code != remoting.ResFlushSlaveTimeout {
				t.Fatalf("%s: send answered code %d %q", what, resp.Code, resp.Remark)
			}
		}
	}
	notOK("no slave", 3)

	// This slave has no haMasterAddress: it takes the master's HA address
	// from the NameServer's answer to its registration, as RocketMQ's do.
	dir := t.TempDir()
	ha := g.master.await(haListenRE)
	conf := filepath.Join(dir, "slave.conf")
	os.WriteFile(conf, []byte("brokerClusterName=c\nbrokerName=broker-a\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n"+
		"brokerRole=SLAVE\nbrokerId=1\n"), 0o600)
	slave := startProc(t, "slave", "broker", "-n", g.nsAddr, "-c", conf, "--data-dir", filepath.Join(dir, "slave"),
		"--broker-listen", "127.0.0.1:0", "--http-listen", "")
	waitFor(t, 30*time.Second, "SEND_OK with the slave", func() bool {
		resp, err := sendOne(g.masterAddr, "R", 0, "with slave")
		return err == nil && resp.Code == remoting.ResSuccess
	})
	if !regexp.MustCompile(`the master's HA address" component=replication addr=` + regexp.QuoteMeta(ha)).MatchString(slave.logs()) {
		t.Fatalf("the slave did not take the master's HA address %s from the NameServer:\n%s", ha, tail(slave.logs(), 4000))
	}
	slave.cmd.Process.Signal(syscall.SIGSTOP)
	notOK("slave frozen", 3)
	slave.cmd.Process.Signal(syscall.SIGCONT)
	waitFor(t, 30*time.Second, "SEND_OK after SIGCONT", func() bool {
		resp, err := sendOne(g.masterAddr, "R", 0, "thawed")
		return err == nil && resp.Code == remoting.ResSuccess
	})
	if err := slave.signal(syscall.SIGTERM); err != nil {
		t.Fatalf("slave exit: %v", err)
	}
	notOK("slave stopped", 3)
}
