package main

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/controller"
)

// keelCmd runs a keel command to completion and returns its exit code and
// output.
func keelCmd(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestClusterShowsReplication: keel cluster lists the group with the
// master's role and in-sync count, and the slave with what the master
// says of it (in sync, lag, last ack) and its own link; -o json carries
// the same. With the slave stopped, the group line says that too few
// copies are in sync.
func TestClusterShowsReplication(t *testing.T) {
	g := startReplGroup(t)
	ac := admin.New(admin.Config{NamesrvAddrs: []string{g.namesrv}})
	defer ac.Close()
	ctx := context.Background()
	firstSend(t, ctx, ac, admin.SendSpec{Topic: "R", Body: []byte("replicated")}, g.logs)
	// The slave learns the master's confirmed offset from the next frame
	// (a heartbeat within 500 ms).
	want := []*regexp.Regexp{
		regexp.MustCompile(`broker-a \(cluster c\): SYNC_MASTER, 2 of 2 copies in sync, minInSyncReplicas 2\n`),
		regexp.MustCompile(`\n0\s+SYNC_MASTER\s+` + regexp.QuoteMeta(g.masterAddr) + `\s+1\s+[1-9]\d*\s+[1-9]\d*\s+-\s+-\s+-\s+-\s+-\n`),
		regexp.MustCompile(`\n1\s+SLAVE\s+` + regexp.QuoteMeta(g.slaveAddr) + `\s+1\s+[1-9]\d*\s+[1-9]\d*\s+yes\s+0\s+0s\s+\S+ ago\s+following 127\.0\.0\.1:\d+, heard \S+ ago\n`),
	}
	var out string
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, o, _ := keelCmd("cluster", "-n", g.namesrv)
		out = o
		missing := code != 0
		for _, re := range want {
			missing = missing || !re.MatchString(o)
		}
		if !missing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("keel cluster does not show the group as expected (%v):\n%s", want, out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	code, js, stderr := keelCmd("cluster", "-n", g.namesrv, "-o", "json")
	var gs []admin.BrokerGroup
	if err := json.Unmarshal([]byte(js), &gs); code != 0 || err != nil {
		t.Fatalf("keel cluster -o json: %d %v\n%s%s", code, err, js, stderr)
	}
	if len(gs) != 1 || len(gs[0].Members) != 2 || gs[0].Members[0].Replication == nil || gs[0].Members[1].Replication == nil {
		t.Fatalf("json groups %s", js)
	}
	ms, ss := gs[0].Members[0].Replication, gs[0].Members[1].Replication
	if r, ok := ms.Replica(1); !ok || !r.InSync || ms.Role != "SYNC_MASTER" || ss.Role != "SLAVE" || !ss.Connected {
		t.Fatalf("json master %+v slave %+v", ms, ss)
	}

	g.slave.stop()
	waitFor(t, "keel cluster to show too few in sync", 30*time.Second, func() bool {
		code, o, _ := keelCmd("cluster", "-n", g.namesrv)
		out = o
		return strings.Contains(o, "TOO FEW IN SYNC") && code == 0
	})
	if !strings.Contains(out, "1 of 1 copies in sync, minInSyncReplicas 2: TOO FEW IN SYNC, sends are refused") {
		t.Errorf("keel cluster with the slave gone:\n%s", out)
	}
}

// A group the controllers hold that no member registered is listed with
// the controller's view, saying it is without a master.
func TestClusterTableControllerOnlyGroup(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	gs := []clusterGroup{{BrokerGroup: admin.BrokerGroup{Name: "broker-b"}, Controller: &controllerGroup{
		MasterID: 2, MasterAddr: "127.0.0.1:10921", MasterEpoch: 3, InSync: []controller.Member{{ID: 2}, {ID: 3}}, InSyncEpoch: 5,
		WithoutMasterSinceMillis: at.UnixMilli(),
		Elections: []controller.Event{{Kind: controller.EventElect, TimeMillis: at.Add(-time.Minute).UnixMilli(), Epoch: 3, OldMasterID: 1, MasterID: 2,
			Fenced: []controller.Fenced{{ID: 2, LastEpoch: 2, LogEnd: 900}, {ID: 3, LastEpoch: 2, LogEnd: 800}}}},
	}}}
	var b bytes.Buffer
	tw := newTable(&b)
	clusterTable(tw, gs, at)
	tw.Flush()
	want := "broker-b: no member registered with the NameServers\n" +
		"  controller: master replica 2 at 127.0.0.1:10921, master epoch 3, in-sync [2 3] (epoch 5)\n" +
		"  WITHOUT A MASTER since 2026-12-01T10:00:00Z: no live in-sync replica answered\n" +
		"  2026-12-01T09:59:00Z elect epoch 3: replica 1 -> replica 2 (fenced 2@2:900 3@2:800)\n"
	if b.String() != want {
		t.Fatalf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}
