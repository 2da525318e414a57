package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/twmb/franz-go/pkg/kgo"
)

// startBrokerProc runs `keel broker` as a child process (so that a test can
// kill it with SIGKILL) and returns it with its logs.
func startBrokerProc(t *testing.T, args ...string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(os.Args[0], append([]string{"broker"}, args...)...)
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-exited })
	return cmd, logs
}

// awaitLog waits for re in logs and returns its first group.
func awaitLog(t *testing.T, what string, logs *syncBuffer, re *regexp.Regexp) string {
	t.Helper()
	var m []string
	waitFor(t, what, 30*time.Second, func() bool { m = re.FindStringSubmatch(logs.String()); return m != nil })
	return m[1]
}

// TestMasterKilled: a SYNC_MASTER (a child process, with the Kafka door)
// and its SLAVE; messages sent by the tools and by franz-go, a consumer
// group with a committed offset; then the master is killed with SIGKILL.
// keel cluster shows the group without a master and the master as
// unreachable since its slave's last contact (and exits non-zero); every
// read command answers from the slave and says so in one line on stderr;
// a send says that there is no master.
func TestMasterKilled(t *testing.T) {
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	nsAddr := ns.await(t, "the NameServer to listen", listenRE)
	common := "brokerClusterName=c\nbrokerName=broker-a\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n" +
		"minInSyncReplicas=2\nreplicaAckTimeoutMillis=1000\n"
	dir := t.TempDir()
	master, mlogs := startBrokerProc(t, "-n", nsAddr, "-c", writeConf(t, common+"brokerRole=SYNC_MASTER\nbrokerId=0\n"),
		"--data-dir", dir+"/master", "--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--http-listen", "",
		"--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
	ha := awaitLog(t, "the master's HA listener", mlogs, haListenRE)
	kafkaAddr := awaitLog(t, "the master's Kafka listener", mlogs, kafkaListenRE)
	masterAddr := awaitLog(t, "the master's broker listener", mlogs, brokerListenRE)
	slave := startRun(t, "broker", "-n", nsAddr, "-c", writeConf(t, common+"brokerRole=SLAVE\nbrokerId=1\nhaMasterAddress="+ha+"\n"),
		"--data-dir", dir+"/slave", "--broker-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0", "--amqp-listen", "", "--kafka-listen", "")
	slaveAddr := slave.await(t, "the slave's broker listener", brokerListenRE)
	slaveHTTP := slave.await(t, "the slave's HTTP listener", httpListenRE)

	ac := admin.New(admin.Config{NamesrvAddrs: []string{nsAddr}})
	defer ac.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	firstSend(t, ctx, ac, admin.SendSpec{Topic: "R", Body: []byte("first"), Keys: []string{"k-0"}},
		func() string { return "master:\n" + mlogs.String() + "\nslave:\n" + slave.logs.String() })
	sent, err := ac.Send(ctx, admin.SendSpec{Topic: "R", Body: []byte("second"), Keys: []string{"k-1"}})
	if err != nil {
		t.Fatal(err)
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddr), kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	if err := kc.ProduceSync(ctx, &kgo.Record{Topic: "R", Key: []byte("kafka-key"), Value: []byte("third")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	kc.Close()
	cl, err := remoting.Dial(ctx, masterAddr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	hb := `{"clientID":"worker-1","producerDataSet":[],"consumerDataSet":[{"groupName":"workers","consumeType":"CONSUME_PASSIVELY",` +
		`"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","subscriptionDataSet":[{"topic":"R",` +
		`"subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}`
	for _, req := range []*remoting.Command{remoting.NewRequest(remoting.ReqHeartBeat, nil, []byte(hb)),
		remoting.NewRequest(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "workers", "topic": "R", "queueId": "0", "commitOffset": "1"}, nil)} {
		if resp, err := cl.Invoke(ctx, req); err != nil || resp.Code != remoting.ResSuccess {
			t.Fatalf("%v: %v %+v", remoting.RequestCode(req.Code), err, resp)
		}
	}
	cl.Close()
	// The slave has the group and its offset once the master's offsets
	// are flushed (a system record) and replicated.
	sc, err := remoting.Dial(ctx, slaveAddr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slave to hold the group's offset", 30*time.Second, func() bool {
		resp, err := sc.Invoke(ctx, remoting.NewRequest(remoting.ReqQueryConsumerOffset,
			map[string]string{"consumerGroup": "workers", "topic": "R", "queueId": "0"}, nil))
		return err == nil && resp.Code == remoting.ResSuccess && resp.ExtFields["offset"] == "1"
	})
	sc.Close()

	if err := master.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var out, errOut string
	var code int
	waitFor(t, "keel cluster to show the group without a master", 30*time.Second, func() bool {
		code, out, errOut = keelCmd("cluster", "-n", nsAddr)
		return strings.Contains(out, "NO MASTER: the master is not registered") // at once: the NameServer saw its connection close
	})
	wantMatch(t, "keel cluster", out,
		`broker-a \(cluster c\): NO MASTER: the master is not registered with the NameServers, unreachable since \d{4}-\d\d-\d\d [\d:.]+ \(\S+ ago, its slaves' last contact\)`,
		`(?m)^0\s+MASTER\s+`+regexp.QuoteMeta(ha)+` \(replication; not registered\)(\s+-){7}\s+unreachable since `,
		`(?m)^1\s+SLAVE\s+`+regexp.QuoteMeta(slaveAddr)+`\s+1\s+\d+\s+\d+\s+-\s+-\s+-\s+-\s+not connected, heard \S+ ago$`)
	if code == 0 || strings.Contains(out, "not replicated") {
		t.Errorf("keel cluster with the master down: exit %d\n%s%s", code, out, errOut)
	}

	notice := "keel: broker group broker-a has no master registered with the NameServers: reading from its slave 1 at " + slaveAddr + " (what the master confirmed to it)\n"
	read := func(want string, args ...string) string {
		t.Helper()
		code, out, errOut := keelCmd(append(args, "-n", nsAddr)...)
		if code != 0 || errOut != notice || !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("keel %q with the master down: exit %d, stderr %q (want %q), stdout (want %s):\n%s", args, code, errOut, notice, want, out)
		}
		return out
	}
	read(`(?m)^R\s+normal\s+1\s+1\s+RW`, "topic", "list")
	read(`(?m)^broker-a\s+0\s+0\s+3\s+3$`, "topic", "describe", "R")
	tail := read(`(?s)first.*second.*third`, "msg", "tail", "--topic", "R", "--from-beginning", "--count", "3", "-o", "json")
	read(`Body:\s+6 bytes\s+second`, "msg", "get", sent.MsgID)
	read(`Body:\s+6 bytes\s+second`, "msg", "get", sent.OffsetMsgID)
	read(`(?m)^\S+\s+0\s+1\s+.*k-1\s+6$`, "msg", "query", "--topic", "R", "--key", "k-1")
	read(`(?m)^\S+\s+0\s+2\s+.*kafka-key\s+5$`, "msg", "query", "--topic", "R", "--key", "kafka-key")
	read(`(?m)^R\s+broker-a\s+0\s+3\s+1\s+2\s+`, "group", "describe", "workers")
	read(`workers`, "group", "list")
	read(`(?m)^Dead letters of workers`, "dlq", "list", "--group", "workers")
	read(``, "amqp", "queues")
	var third admin.Message
	if lines := strings.Split(strings.TrimSpace(tail), "\n"); len(lines) != 3 || json.Unmarshal([]byte(lines[2]), &third) != nil {
		t.Fatalf("tail: %s", tail)
	}
	read(`Body:\s+5 bytes\s+third`, "msg", "get", third.MsgID)
	read(`Body:\s+5 bytes\s+third`, "msg", "get", third.OffsetMsgID)

	// The slave's console: its pages answer, saying they read from the
	// slave; the replication page shows the group without a master.
	for _, path := range []string{"/api/overview", "/api/topics", "/api/topics/R", "/api/groups", "/api/groups/workers",
		"/api/messages?id=" + sent.MsgID, "/api/messages?id=" + third.MsgID, "/api/topics/R/messages?from=0"} {
		resp, err := http.Get("http://" + slaveHTTP + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := map[string]string{sent.MsgID: "second", third.MsgID: "third"}[strings.TrimPrefix(path, "/api/messages?id=")]; want != "" &&
			!strings.Contains(string(body), `"body": "`+want+`"`) {
			t.Errorf("console %s: not the message %q:\n%s", path, want, body)
		}
		if resp.StatusCode != 200 || resp.Header.Get("X-Keel-Slave-Reads")+"\n" != strings.TrimPrefix(notice, "keel: ") {
			t.Errorf("console %s: %d, header %q\n%s", path, resp.StatusCode, resp.Header.Get("X-Keel-Slave-Reads"), body)
		}
	}
	resp, err := http.Get("http://" + slaveHTTP + "/api/replication")
	if err != nil {
		t.Fatal(err)
	}
	var gs []admin.BrokerGroup
	err = json.NewDecoder(resp.Body).Decode(&gs)
	resp.Body.Close()
	if err != nil || len(gs) != 1 || gs[0].MasterDown == nil || gs[0].MasterDown.Registered || gs[0].MasterDown.Address != ha ||
		gs[0].MasterDown.LastHeard.IsZero() || time.Since(gs[0].MasterDown.LastHeard) > time.Minute {
		t.Errorf("console replication: %v %+v", err, gs)
	}

	code, _, errOut = keelCmd("msg", "send", "--topic", "R", "--body", "x", "-n", nsAddr)
	if code == 0 || !strings.Contains(errOut, "no master broker is registered") {
		t.Errorf("a send with the master down: exit %d, %q", code, errOut)
	}
}
