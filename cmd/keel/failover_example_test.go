package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// failoverExamplePorts is how many ports examples/failover/run.sh uses
// from its base.
const failoverExamplePorts = 19

// scrapeSeries reads url's Prometheus text: series to value; nil when it
// does not answer.
func scrapeSeries(url string) map[string]float64 {
	resp, err := http.Get(url)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// TestFailoverExampleScript keeps examples/failover/run.sh working as
// docs/replication.md and examples/README.md say. With --check it starts
// everything, waits for the master and stops. Run as a user would (it
// builds keel), on a port range chosen now, it starts three
// controllers, a NameServer and three brokers in controller mode, reports
// the elected master, prints what to run; the controllers' and the
// brokers' /metrics show the election; Ctrl-C (SIGINT) stops every
// process it started.
func TestFailoverExampleScript(t *testing.T) {
	if testing.Short() {
		t.Skip("builds keel and starts seven processes")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash: " + err.Error())
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command: " + err.Error())
	}
	root := filepath.Join("..", "..")
	for doc, want := range map[string]string{"docs/replication.md": "examples/failover/run.sh", "examples/README.md": "failover/run.sh"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not mention %s", doc, want)
		}
	}
	// --check: start, wait for the master, stop, exit 0.
	base := freePortRange(t, failoverExamplePorts)
	check := exec.Command(bash, filepath.Join(root, "examples", "failover", "run.sh"), "--check")
	check.Env = append(os.Environ(), "KEEL_FAILOVER_BASE="+strconv.Itoa(base), "KEEL_FAILOVER_DIR="+t.TempDir())
	check.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var checkOut syncBuffer
	check.Stdout, check.Stderr = &checkOut, &checkOut
	if err := check.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(-check.Process.Pid, syscall.SIGKILL) })
	checkDone := make(chan error, 1)
	go func() { checkDone <- check.Wait() }()
	select {
	case err := <-checkDone:
		if err != nil || !strings.Contains(checkOut.String(), "MASTER=127.0.0.1:") || !strings.Contains(checkOut.String(), "stopped; data and logs are in") {
			t.Fatalf("run.sh --check: %v\n%s", err, checkOut.String())
		}
	case <-time.After(120 * time.Second): // a cold build cache makes the build long
		t.Fatalf("run.sh --check did not end within 120 s\n%s", checkOut.String())
	}

	base = freePortRange(t, failoverExamplePorts)
	work := t.TempDir()
	cmd := exec.Command(bash, filepath.Join(root, "examples", "failover", "run.sh"))
	cmd.Env = append(os.Environ(), "KEEL_FAILOVER_BASE="+strconv.Itoa(base), "KEEL_FAILOVER_DIR="+work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the cleanup below reaches every child
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var stdout syncBuffer
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(io.TeeReader(out, &stdout))
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	logs := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "stdout:\n%s\nstderr:\n%s\n", stdout.String(), stderr.String())
		matches, _ := filepath.Glob(filepath.Join(work, "*.log"))
		for _, f := range matches {
			data, _ := os.ReadFile(f)
			if len(data) > 4000 {
				data = data[len(data)-4000:]
			}
			fmt.Fprintf(&b, "--- %s (tail):\n%s\n", filepath.Base(f), data)
		}
		return b.String()
	}

	// The script prints MASTER=addr once elected, then the instructions,
	// ending with the Ctrl-C line.
	master, ready := "", false
	deadline := time.After(120 * time.Second) // a cold build cache makes the build long
	for !ready {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the script ended before it was ready\n%s", logs())
			}
			if m, ok := strings.CutPrefix(l, "MASTER="); ok {
				master = m
			}
			ready = strings.HasPrefix(l, "Ctrl-C here stops everything")
		case <-deadline:
			t.Fatalf("the script was not ready within 120 s\n%s", logs())
		}
	}
	text := stdout.String()
	for _, want := range []string{"controller status --controller-addr", "go run ./examples/producer -n 127.0.0.1:" + strconv.Itoa(base),
		"kill -9 ", "rejoins as a slave"} {
		if !strings.Contains(text, want) {
			t.Errorf("the instructions lack %q:\n%s", want, text)
		}
	}
	_, mport, err := net.SplitHostPort(master)
	if err != nil {
		t.Fatalf("MASTER=%q: %v\n%s", master, err, logs())
	}
	mi := (mustAtoi(t, mport) - base - 10) / 3
	if mi < 0 || mi > 2 {
		t.Fatalf("master %s is none of the brokers (base %d)", master, base)
	}

	// The controllers' metrics: one acting leader, one initial election,
	// the group at master epoch 1 with a master.
	waitFor(t, "the controllers' /metrics to show the election", 20*time.Second, func() bool {
		acting, initial := 0.0, 0.0
		for i := range 3 {
			s := scrapeSeries(fmt.Sprintf("http://127.0.0.1:%d/metrics", base+5+i))
			if s == nil || s[`keel_controller_group_master_epoch{group="broker-a"}`] != 1 {
				return false
			}
			acting += s["keel_controller_acting_leader"]
			initial += s[`keel_controller_elections_total{kind="initial"}`]
			if s["keel_controller_acting_leader"] == 1 && s["keel_controller_groups_without_master"] != 0 {
				return false
			}
		}
		return acting == 1 && initial == 1
	})
	// The brokers': the master at epoch 1, the others slaves of it, each
	// having promised epoch 1 in the election's fence.
	waitFor(t, "the brokers' /metrics to show their roles", 30*time.Second, func() bool {
		for i := range 3 {
			s := scrapeSeries(fmt.Sprintf("http://127.0.0.1:%d/metrics", base+12+3*i))
			role := "slave"
			if i == mi {
				role = "master"
			}
			if s == nil || s[`keel_controlled_role{role="`+role+`"}`] != 1 || s["keel_controlled_master_epoch"] != 1 ||
				s["keel_controlled_promised_epoch"] != 1 || s["keel_controlled_fences_total"] < 1 || s["keel_controlled_role_changes_total"] != 1 {
				return false
			}
		}
		return true
	})

	// keel cluster --controller-addr: the group with the controller's
	// view (master, epoch, the initial election) beside the brokers'.
	nsAddr := "127.0.0.1:" + strconv.Itoa(base)
	ctrlAddrs := fmt.Sprintf("127.0.0.1:%d;127.0.0.1:%d;127.0.0.1:%d", base+2, base+3, base+4)
	wantLines := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^broker-a \(cluster FailoverCluster\): SYNC_MASTER, 3 of 3 copies in sync`),
		regexp.MustCompile(`(?m)^  controller: master replica \d+ at ` + regexp.QuoteMeta(master) + `, master epoch 1, in-sync \[\d+ \d+ \d+\] \(epoch \d+\)$`),
		regexp.MustCompile(`(?m)^  \S+Z initial epoch 1: none -> replica \d+ \(fenced \d+@0:0 \d+@0:0 \d+@0:0\)$`),
	}
	var clusterOut string
	waitFor(t, "keel cluster to show the group with the controller's view", 30*time.Second, func() bool {
		code, o, _ := keelCmd("cluster", "-n", nsAddr, "--controller-addr", ctrlAddrs)
		clusterOut = o
		for _, re := range wantLines {
			if !re.MatchString(o) {
				return false
			}
		}
		return code == 0
	})
	code, o, _ := keelCmd("cluster", "-n", nsAddr, "--controller-addr", ctrlAddrs, "-o", "json")
	var js []struct {
		Name       string `json:"brokerName"`
		Members    []json.RawMessage
		Controller *controllerGroup
	}
	if err := json.Unmarshal([]byte(o), &js); code != 0 || err != nil || len(js) != 1 || js[0].Name != "broker-a" || len(js[0].Members) != 3 ||
		js[0].Controller == nil || js[0].Controller.MasterEpoch != 1 || js[0].Controller.MasterAddr != master ||
		len(js[0].Controller.Elections) != 1 || js[0].Controller.Elections[0].Kind != "initial" {
		t.Errorf("keel cluster -o json (exit %d, %v):\n%s", code, err, o)
	}
	// Controllers that do not answer: the groups are still listed, and
	// the command fails saying why.
	dead := reserveLoopbackPorts(t, 1)[0]
	code, o, e := keelCmd("cluster", "-n", nsAddr, "--controller-addr", dead, "--timeout", "2s")
	if code == 0 || !strings.Contains(o, "broker-a (cluster FailoverCluster)") || strings.Contains(o, "  controller:") || !strings.Contains(e, "controller:") {
		t.Errorf("keel cluster with no controller answering: exit %d\n%s\n%s", code, o, e)
	}
	t.Logf("keel cluster --controller-addr:\n%s", clusterOut)

	// Ctrl-C: the script stops every process and exits.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("the script did not stop within 30 s of SIGINT\n%s", logs())
	}
	if !strings.Contains(stdout.String(), "stopped; data and logs are in") {
		t.Errorf("no stop line:\n%s", stdout.String())
	}
	for _, p := range []int{base, base + 2, base + 3, base + 4, base + 5, base + 10, base + 13, base + 16} {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(p), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d still answers after the script stopped", p)
		}
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
