package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/replication"
	"github.com/keelmq/keel/internal/vfs"
)

// keelCmdIn runs a keel command with in as its standard input and returns
// its exit code and output.
func keelCmdIn(in string, args ...string) (int, string) {
	var out bytes.Buffer
	root := newRootCmd(&out, &out)
	root.SetArgs(args)
	root.SetIn(strings.NewReader(in))
	err := root.ExecuteContext(context.Background())
	switch {
	case err == nil:
		return exitOK, out.String()
	case errors.Is(err, errProblems):
		return exitProblems, out.String()
	}
	return exitError, out.String() + err.Error()
}

// replicatedDirs runs a SYNC_MASTER and its SLAVE, sends n messages, waits
// until the slave acknowledged all of them, stops both and returns the
// group (data directories, broker.conf files) and the send results.
func replicatedDirs(t *testing.T, n int) (*replGroup, []admin.SendResult) {
	g := startReplGroup(t)
	ac := admin.New(admin.Config{NamesrvAddrs: []string{g.namesrv}})
	defer ac.Close()
	ctx := context.Background()
	sent := []admin.SendResult{firstSend(t, ctx, ac, admin.SendSpec{Topic: "R", Body: []byte("first")}, g.logs)}
	for i := range n {
		r, err := ac.Send(ctx, admin.SendSpec{Topic: "R", Body: []byte(fmt.Sprintf("%03d-%s", i, strings.Repeat("m", 2000)))})
		if err != nil || r.Status != "SEND_OK" {
			t.Fatalf("send %d: %+v %v", i, r, err)
		}
		sent = append(sent, r)
	}
	waitFor(t, "the slave to acknowledge everything", 30*time.Second, func() bool {
		gs, err := ac.BrokerGroups(ctx)
		if err != nil || len(gs) != 1 {
			return false
		}
		m, _ := gs[0].Master()
		if m.Replication == nil {
			return false
		}
		r, ok := m.Replication.Replica(1)
		return ok && r.AckedOffset == m.Replication.WrittenOffset
	})
	g.slave.stop()
	g.master.stop()
	return g, sent
}

// TestCheckCompareAndRepairFromReplica: the master's and the slave's data
// directories compare identical; a record corrupted in the middle of the
// master's CommitLog makes keel check fail and --compare name its offset;
// --repair-from-replica asks for confirmation (no: nothing changes), then
// takes the slave's bytes: keel check is clean and the two CommitLogs are
// byte-identical again.
func TestCheckCompareAndRepairFromReplica(t *testing.T) {
	g, sent := replicatedDirs(t, 40)
	check := func(in string, args ...string) (int, string) {
		return keelCmdIn(in, append([]string{"check", "-c", g.masterConf, "--data-dir", g.masterDir}, args...)...)
	}
	if code, out := check("", "--compare", g.slaveDir); code != exitOK || !strings.Contains(out, "IDENTICAL over [0, ") ||
		!strings.Contains(out, "they end at the same offset") {
		t.Fatalf("compare before the damage: %d\n%s", code, out)
	}
	masterSeg := filepath.Join(g.masterDir, "commitlog", fmt.Sprintf("%020d", 0))
	slaveSeg := filepath.Join(g.slaveDir, "commitlog", fmt.Sprintf("%020d", 0))
	_, phys, err := message.ParseOffsetMsgID(sent[20].OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	flip(t, masterSeg, phys+70)

	if code, out := check(""); code != exitProblems || !strings.Contains(out, "corrupt CommitLog entry") {
		t.Fatalf("check of the damaged master: %d\n%s", code, out)
	}
	code, out := check("", "--compare", g.slaveDir)
	want := fmt.Sprintf("DIFFER: first differing byte at offset %d (segment commitlog/%020d, position %d), in the entry at %d in A and %d in B",
		phys+70, 0, phys+70, phys, phys)
	if code != exitProblems || !strings.Contains(out, want) {
		t.Fatalf("compare after the damage: %d, want %q:\n%s", code, want, out)
	}
	if code, out := check("no\n", "--repair-from-replica", g.slaveDir); code != exitProblems || !strings.Contains(out, "not confirmed: nothing was changed") {
		t.Fatalf("repair not confirmed: %d\n%s", code, out)
	}
	if code, _ := check(""); code != exitProblems {
		t.Fatal("an unconfirmed repair changed the store")
	}
	code, out = check("yes\n", "--repair-from-replica", g.slaveDir)
	if code != exitOK || !regexp.MustCompile(fmt.Sprintf(`damaged: .*: offsets \[%d, \d+\) \(\d+ bytes\): the replica's bytes there verify \(1 entry\)`, phys)).MatchString(out) ||
		!strings.Contains(out, "OK: no problems") || !strings.Contains(out, ".replaced") {
		t.Fatalf("repair: %d\n%s", code, out)
	}
	if code, out := check("", "--compare", g.slaveDir); code != exitOK {
		t.Fatalf("compare after the repair: %d\n%s", code, out)
	}
	mb, sb := readFile(t, masterSeg), readFile(t, slaveSeg)
	_, end, _ := message.ParseOffsetMsgID(sent[len(sent)-1].OffsetMsgID)
	if !bytes.Equal(mb[:end], sb[:end]) {
		t.Fatal("the repaired master's CommitLog differs from the slave's")
	}
}

// TestCheckCompareLonger: a slave with a message more than the master
// (the master lost its tail) compares identical up to the master's end,
// and the slave is named the longer one.
func TestCheckCompareLonger(t *testing.T) {
	g, sent := replicatedDirs(t, 5)
	_, last, _ := message.ParseOffsetMsgID(sent[len(sent)-1].OffsetMsgID)
	seg := filepath.Join(g.masterDir, "commitlog", fmt.Sprintf("%020d", 0))
	if err := os.Truncate(seg, last); err != nil { // the master without its last record
		t.Fatal(err)
	}
	code, out := keelCmdIn("", "check", "-c", g.masterConf, "--data-dir", g.masterDir, "--compare", g.slaveDir)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("IDENTICAL over [0, %d)", last)) || !strings.Contains(out, "B is longer, by ") {
		t.Fatalf("compare: %d\n%s", code, out)
	}
	if !strings.Contains(out, "epochs: A 1@0, B 1@0") {
		t.Errorf("epochs not shown:\n%s", out)
	}
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRepairFromReplicaOfAnotherEpoch: a replica whose epoch history does
// not hold the damaged range in the same epoch as the damaged store (here:
// another group's history) is refused, even with --yes, and nothing is
// changed.
func TestRepairFromReplicaOfAnotherEpoch(t *testing.T) {
	g, sent := replicatedDirs(t, 10)
	_, phys, err := message.ParseOffsetMsgID(sent[5].OffsetMsgID)
	if err != nil {
		t.Fatal(err)
	}
	flip(t, filepath.Join(g.masterDir, "commitlog", fmt.Sprintf("%020d", 0)), phys+70)
	if err := replication.SaveHistory(vfs.OS{}, replication.EpochFile(g.slaveDir), replication.History{{Epoch: 7, Start: 0}}); err != nil {
		t.Fatal(err)
	}
	code, out := keelCmdIn("", "check", "-c", g.masterConf, "--data-dir", g.masterDir, "--repair-from-replica", g.slaveDir, "--yes")
	if code != exitProblems || !strings.Contains(out, "the epoch histories disagree there (1@0 here, 7@0 on the replica)") ||
		!strings.Contains(out, "nothing to repair from the replica") {
		t.Fatalf("repair from a replica of another epoch: %d\n%s", code, out)
	}
	if code, out := keelCmdIn("", "check", "-c", g.masterConf, "--data-dir", g.masterDir); code != exitProblems {
		t.Fatalf("the refused repair changed the store: %d\n%s", code, out)
	}
}
