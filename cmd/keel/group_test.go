package main

import (
	"bytes"
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
)

// An in-process broker group for the command tests: a NameServer, a
// SYNC_MASTER and a SLAVE, each a `keel namesrv` / `keel broker` run with
// its own data directory, on loopback ports chosen at run time.

var haListenRE = regexp.MustCompile(`msg="replication listening" component=replication addr=(\S+)`)

type keelRun struct {
	logs *syncBuffer
	stop func()
}

// startRun runs keel with args until the test ends.
func startRun(t *testing.T, args ...string) *keelRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &keelRun{logs: &syncBuffer{}}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, &bytes.Buffer{}, r.logs) }()
	stopped := false
	r.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("keel %v did not stop:\n%s", args, r.logs.String())
		}
	}
	t.Cleanup(r.stop)
	return r
}

// await waits for re in the run's log and returns its first group.
func (r *keelRun) await(t *testing.T, what string, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	waitFor(t, what, 30*time.Second, func() bool { m = re.FindStringSubmatch(r.logs.String()); return m != nil })
	return m[1]
}

type replGroup struct {
	namesrv                  string
	master, slave            *keelRun
	masterAddr, slaveAddr    string
	masterDir, slaveDir, dir string
	masterConf, slaveConf    string
}

// startReplGroup starts a NameServer, a SYNC_MASTER (minInSyncReplicas 2)
// and its SLAVE; it returns once the slave is registered.
func startReplGroup(t *testing.T) *replGroup {
	t.Helper()
	g := &replGroup{dir: t.TempDir()}
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	g.namesrv = ns.await(t, "the NameServer to listen", listenRE)
	common := "brokerClusterName=c\nbrokerName=broker-a\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n" +
		"minInSyncReplicas=2\nreplicaAckTimeoutMillis=1000\n"
	mconf := writeConf(t, common+"brokerRole=SYNC_MASTER\nbrokerId=0\n")
	g.masterConf = mconf
	g.masterDir = filepath.Join(g.dir, "master")
	g.master = startRun(t, "broker", "-n", g.namesrv, "-c", mconf, "--data-dir", g.masterDir, "--broker-listen", "127.0.0.1:0",
		"--ha-listen", "127.0.0.1:0", "--http-listen", "", "--amqp-listen", "", "--kafka-listen", "")
	ha := g.master.await(t, "the master's HA listener", haListenRE)
	g.masterAddr = g.master.await(t, "the master's broker listener", brokerListenRE)
	sconf := writeConf(t, common+"brokerRole=SLAVE\nbrokerId=1\nhaMasterAddress="+ha+"\n")
	g.slaveConf = sconf
	g.slaveDir = filepath.Join(g.dir, "slave")
	g.slave = startRun(t, "broker", "-n", g.namesrv, "-c", sconf, "--data-dir", g.slaveDir, "--broker-listen", "127.0.0.1:0",
		"--http-listen", "", "--amqp-listen", "", "--kafka-listen", "")
	g.slaveAddr = g.slave.await(t, "the slave's broker listener", brokerListenRE)
	return g
}

// firstSend creates topic R (one queue) through ac and sends first until
// the master takes it: a SYNC_MASTER with minInSyncReplicas 2 refuses
// sends until its slave is in sync. The topic is created once (a retry of
// the create would find it there). logs gives the members' logs for a
// failure.
func firstSend(t *testing.T, ctx context.Context, ac *admin.Client, first admin.SendSpec, logs func() string) admin.SendResult {
	t.Helper()
	var lastErr error
	created := false
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if !created {
			lastErr = ac.CreateTopic(ctx, admin.TopicSpec{Topic: "R", ReadQueues: 1, WriteQueues: 1, Perm: admin.PermRW})
			created = lastErr == nil
		}
		if created {
			r, err := ac.Send(ctx, first)
			if err == nil {
				return r
			}
			lastErr = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the master to take sends; the last error: %v\n%s", lastErr, logs())
		}
	}
}

// logs is the master's and the slave's logs.
func (g *replGroup) logs() string {
	return "master:\n" + g.master.logs.String() + "\nslave:\n" + g.slave.logs.String()
}
