package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// TestAMQPClusterListing: two broker groups' masters as processes, each
// with its AMQP door and the management API. amqp091-go declares qa
// through broker-a and qb through broker-b (with an argument). The
// management API of either member lists both queues with the node that
// stores each (qb's argument and depth from broker-b), finds the other
// group's queue by name and counts both in the overview; `keel amqp
// queues` lists both under their brokers. broker-b killed with SIGKILL,
// broker-a's API still answers within its bound: broker-b's queue gone
// from the list and broker-b shown as an unreachable node (overview and
// /api/nodes), not dropped; `keel amqp queues` shows broker-b's error
// (broker-a's door saw it in the cluster) and exits non-zero.
func TestAMQPClusterListing(t *testing.T) {
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	nsAddr := ns.await(t, "the NameServer to listen", listenRE)
	dir := t.TempDir()
	var door, mgmt [2]string
	var kill [2]func()
	for i, name := range []string{"broker-a", "broker-b"} {
		conf := "brokerClusterName=c\nbrokerName=" + name + "\nbrokerId=0\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n" +
			"kafkaNodeId=" + strconv.Itoa(i+1) + "\namqpManagementListen=127.0.0.1:0\n"
		cmd, logs := startBrokerProc(t, "-n", nsAddr, "-c", writeConf(t, conf), "--data-dir", filepath.Join(dir, name),
			"--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--http-listen", "",
			"--amqp-listen", "127.0.0.1:0", "--kafka-listen", "")
		door[i] = awaitLog(t, name+"'s AMQP listener", logs, amqpListenRE)
		mgmt[i] = awaitLog(t, name+"'s management listener", logs, amqpMgmtListenRE)
		kill[i] = func() { cmd.Process.Signal(syscall.SIGKILL) }
	}
	c, err := remoting.Dial(context.Background(), nsAddr, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "both AMQP doors registered", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ac, err := namesrv.GetAMQPCluster(ctx, c, "c")
		return err == nil && len(ac.Members) == 2
	})
	cha, chb := openChannel(t, dialAMQP(t, door[0])), openChannel(t, dialAMQP(t, door[1]))
	if _, err := cha.QueueDeclare("qa", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := chb.QueueDeclare("qb", true, false, false, false, amqp091.Table{"x-max-length": int32(100)}); err != nil {
		t.Fatal(err)
	}
	if acked, _ := publishConfirmed(t, chb, "qb", "m", 3, true); acked != 3 {
		t.Fatalf("%d of 3 publishes to qb confirmed", acked)
	}

	type queue struct {
		Name      string         `json:"name"`
		Node      string         `json:"node"`
		Messages  int            `json:"messages"`
		Arguments map[string]any `json:"arguments"`
	}
	getJSON := func(i int, path string, v any) {
		t.Helper()
		code, body := mgmtGet(t, mgmt[i], path, "guest", "guest")
		if code != 200 {
			t.Fatalf("GET %s from member %d: %d %s", path, i, code, body)
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	for i := range 2 {
		var qs []queue
		getJSON(i, "/api/queues", &qs)
		if len(qs) != 2 || qs[0].Name != "qa" || qs[0].Node != "keel@broker-a" || qs[1].Name != "qb" || qs[1].Node != "keel@broker-b" ||
			qs[1].Messages != 3 || qs[1].Arguments["x-max-length"] != float64(100) {
			t.Fatalf("queues through member %d: %+v", i, qs)
		}
		var q queue
		getJSON(i, "/api/queues/%2F/"+[]string{"qb", "qa"}[i], &q)
		if q.Node != []string{"keel@broker-b", "keel@broker-a"}[i] {
			t.Fatalf("the other group's queue through member %d: %+v", i, q)
		}
		var o struct {
			Totals      map[string]int   `json:"object_totals"`
			Queue       map[string]int   `json:"queue_totals"`
			Unreachable []map[string]any `json:"unreachable_nodes"`
		}
		getJSON(i, "/api/overview", &o)
		if o.Totals["queues"] != 2 || o.Queue["messages"] != 3 || len(o.Unreachable) != 0 {
			t.Fatalf("overview through member %d: %+v", i, o)
		}
	}
	// keel amqp queues: every master's queues, each under its broker.
	cl := &cluster{t: t, namesrv: nsAddr}
	var out []admin.BrokerAMQP
	cl.okJSON(&out, "amqp", "queues")
	var listed []string
	for _, b := range out {
		for _, q := range b.Queues {
			listed = append(listed, b.Broker+"/"+q.Name)
		}
	}
	if !slices.Equal(listed, []string{"broker-a/qa", "broker-b/qb"}) {
		t.Fatalf("keel amqp queues lists %v", listed)
	}
	if table := cl.ok("amqp", "queues"); !regexp.MustCompile(`(?m)^broker-b\s+/\s+qb\s`).MatchString(table) {
		t.Fatalf("keel amqp queues:\n%s", table)
	}

	kill[1]()
	waitFor(t, "broker-a's API to show broker-b unreachable", 30*time.Second, func() bool {
		start := time.Now()
		var o struct {
			Totals      map[string]int      `json:"object_totals"`
			Unreachable []map[string]string `json:"unreachable_nodes"`
		}
		getJSON(0, "/api/overview", &o)
		if took := time.Since(start); took > amqpListingTimeout+2*time.Second {
			t.Fatalf("the overview took %v with a group down", took)
		}
		return o.Totals["queues"] == 1 && len(o.Unreachable) == 1 && o.Unreachable[0]["name"] == "keel@broker-b" &&
			o.Unreachable[0]["reason"] != ""
	})
	var qs []queue
	getJSON(0, "/api/queues", &qs)
	if len(qs) != 1 || qs[0].Name != "qa" {
		t.Fatalf("queues with broker-b down: %+v", qs)
	}
	var nodes []struct {
		Name    string `json:"name"`
		Running bool   `json:"running"`
		Reason  string `json:"reason"`
	}
	getJSON(0, "/api/nodes", &nodes)
	if len(nodes) != 2 || nodes[0].Name != "keel@broker-a" || !nodes[0].Running || nodes[1].Name != "keel@broker-b" || nodes[1].Running ||
		!strings.Contains(nodes[1].Reason, "broker-b") {
		t.Fatalf("nodes with broker-b down: %+v", nodes)
	}
	t.Logf("broker-b: %s", nodes[1].Reason)
	// keel amqp queues (and the console, which reads the same) shows
	// broker-b as down, from broker-a's door, and exits non-zero.
	var code int
	var table, errOut string
	waitFor(t, "keel amqp queues to show broker-b down", 30*time.Second, func() bool {
		code, table, errOut = cl.keel("amqp", "queues")
		return code != exitOK && regexp.MustCompile(`(?m)^broker-b\s+ERROR: no master of broker group broker-b`).MatchString(table)
	})
	if !regexp.MustCompile(`(?m)^broker-a\s+/\s+qa\s`).MatchString(table) || !strings.Contains(errOut, "broker broker-b") {
		t.Fatalf("keel amqp queues with broker-b down: exit %d\n%s\n%s", code, table, errOut)
	}
}
