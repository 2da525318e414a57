package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/controller"
	"github.com/keelmq/keel/internal/remoting"
)

type controllerProc struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan struct{}
}

func startControllerProc(t *testing.T, dir, addr string, extra ...string) *controllerProc {
	t.Helper()
	return startControllerProcIn(t, "", dir, addr, extra...)
}

// startControllerProcIn runs a keel controller in network namespace
// netns ("": this one).
func startControllerProcIn(t *testing.T, netns, dir, addr string, extra ...string) *controllerProc {
	t.Helper()
	args := append([]string{"controller", "--data-dir", dir, "--controller-listen", addr}, extra...)
	return startKeelProcIn(t, netns, args...)
}

// controllerStatus runs keel controller status -o json in-process.
func controllerStatus(t *testing.T, addrs []string) (controller.Status, bool) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code := run(ctx, []string{"controller", "status", "--controller-addr", strings.Join(addrs, ";"), "-o", "json", "--timeout", "2s"}, &out, &errOut)
	if code != exitOK {
		return controller.Status{}, false
	}
	var st controller.Status
	if err := json.Unmarshal(out.Bytes(), &st); err != nil {
		t.Fatalf("status output %q: %v", out.String(), err)
	}
	return st, true
}

// TestControllerProcessesSurviveKill9 runs three keel controller
// processes on loopback: they elect a leader; the leader is killed with
// SIGKILL; the other two elect another, which keeps the state; the killed
// one restarts from its data directory and rejoins.
func TestControllerProcessesSurviveKill9(t *testing.T) {
	addrs := reserveLoopbackPorts(t, 3)
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	procs := make([]*controllerProc, 3)
	procs[0] = startControllerProc(t, dirs[0], addrs[0], "--bootstrap="+strings.Join(addrs, ","))
	for i := 1; i < 3; i++ {
		procs[i] = startControllerProc(t, dirs[i], addrs[i])
	}
	var st controller.Status
	waitFor(t, "an acting leader with three voters", 30*time.Second, func() bool {
		var ok bool
		st, ok = controllerStatus(t, addrs)
		return ok && st.Acting && len(st.Voters) == 3 && st.ClusterID != ""
	})
	cluster, first := st.ClusterID, st.LeaderAddr
	leader := -1
	for i, a := range addrs {
		if a == first {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("leader %q is none of %v", first, addrs)
	}

	// A broker-like client registers a store, so that there is state to
	// keep across the failover.
	cl := controller.NewClient(addrs)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	reg, err := cl.Register(ctx, controller.RegisterRequest{Group: "broker-a", StoreUUID: "store-1", Addr: "127.0.0.1:1", Incarnation: 1})
	if err != nil {
		t.Fatal(err)
	}
	if reg.View.ClusterID != cluster {
		t.Fatalf("registration answered cluster %q, want %q", reg.View.ClusterID, cluster)
	}

	procs[leader].cmd.Process.Signal(syscall.SIGKILL)
	<-procs[leader].exited
	waitFor(t, "another leader", 30*time.Second, func() bool {
		var ok bool
		st, ok = controllerStatus(t, addrs)
		return ok && st.Acting && st.LeaderAddr != first
	})
	if st.ClusterID != cluster || len(st.Groups) != 1 || st.Groups[0].Replicas[reg.ReplicaID] == nil {
		t.Fatalf("new leader's state: %+v", st)
	}

	procs[leader] = startControllerProc(t, dirs[leader], addrs[leader])
	waitFor(t, "the killed voter to rejoin", 30*time.Second, func() bool {
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if run(ctx, []string{"controller", "status", "--controller-addr", addrs[leader], "-o", "json", "--timeout", "2s"}, &out, &errOut) != exitOK {
			return false
		}
		var s controller.Status
		return json.Unmarshal(out.Bytes(), &s) == nil && s.ClusterID == cluster && (s.Acting || s.LeaderAddr != "") && len(s.Groups) == 1
	})

	// Operator commands: allow-unclean is audited; a switch-over of a group
	// without a master is refused with the reason.
	var out0, err0 bytes.Buffer
	if code := run(context.Background(), []string{"controller", "allow-unclean", "--controller-addr", strings.Join(addrs, ";"),
		"--group", "broker-a", "--note", "drill"}, &out0, &err0); code != exitOK || !strings.Contains(out0.String(), "group broker-a") {
		t.Fatalf("allow-unclean exited %d: %s %s", code, out0.String(), err0.String())
	}
	err0.Reset()
	if code := run(context.Background(), []string{"controller", "switch-over", "--controller-addr", strings.Join(addrs, ";"),
		"--group", "broker-a", "--to", "1"}, &out0, &err0); code == exitOK || !strings.Contains(err0.String(), "has no master") {
		t.Fatalf("switch-over without a master exited %d: %s", code, err0.String())
	}

	// The table form names the leader, the voters and the group.
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"controller", "status", "--controller-addr", strings.Join(addrs, ";")}, &out, &errOut); code != exitOK {
		t.Fatalf("status exited %d: %s", code, errOut.String())
	}
	for _, want := range []string{"view of leader", "VOTER", addrs[0], addrs[1], addrs[2], "group broker-a: master none, master epoch 0",
		"unclean elections ALLOWED", "allow-unclean epoch 0: none -> none (unclean elections allowed: drill)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestControllerBootstrapTwiceRefused(t *testing.T) {
	addr := reserveLoopbackPorts(t, 1)[0]
	dir := t.TempDir()
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"controller", "--data-dir", dir, "--controller-listen", addr, "--bootstrap=" + addr}, &bytes.Buffer{}, &logs)
	}()
	waitFor(t, "the controller to act", 30*time.Second, func() bool { return strings.Contains(logs.String(), "controller leader: acting") })
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("controller exited %d:\n%s", code, logs.String())
	}
	var errOut bytes.Buffer
	code := run(context.Background(), []string{"controller", "--data-dir", dir, "--controller-listen", addr, "--bootstrap=" + addr}, &bytes.Buffer{}, &errOut)
	if code != exitError || !strings.Contains(errOut.String(), "already bootstrapped") {
		t.Fatalf("second bootstrap exited %d: %s", code, errOut.String())
	}
	// --bootstrap LIST (without '=') is a usage error naming the fix.
	errOut.Reset()
	code = run(context.Background(), []string{"controller", "--data-dir", t.TempDir(), "--controller-listen", addr, "--bootstrap", addr}, &bytes.Buffer{}, &errOut)
	if code != exitUsage || !strings.Contains(errOut.String(), "--bootstrap=LIST") {
		t.Fatalf("--bootstrap LIST exited %d: %s", code, errOut.String())
	}
	// An error for a voter list without this node.
	errOut.Reset()
	other := reserveLoopbackPorts(t, 1)[0]
	code = run(context.Background(), []string{"controller", "--data-dir", t.TempDir(), "--controller-listen", addr, "--bootstrap=" + other}, &bytes.Buffer{}, &errOut)
	if code == exitOK || !strings.Contains(errOut.String(), "do not include this node") {
		t.Fatalf("bootstrap without this node exited %d: %s", code, errOut.String())
	}
}

// TestNamesrvEmbedsController: keel namesrv --controller-listen runs a
// NameServer and a controller voter in one process.
func TestNamesrvEmbedsController(t *testing.T) {
	addr := reserveLoopbackPorts(t, 1)[0]
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"namesrv", "--namesrv-listen", "127.0.0.1:0", "--controller-listen", addr,
			"--controller-data-dir", tempDir, "--bootstrap=" + addr}, &bytes.Buffer{}, &logs)
	}()
	ns := namesrvAddrFromLogs(t, &logs)
	waitFor(t, "the embedded controller to act", 30*time.Second, func() bool {
		st, ok := controllerStatus(t, []string{addr})
		return ok && st.Acting && st.ClusterID != ""
	})
	waitFor(t, "the NameServer to answer", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cl, err := remoting.Dial(ctx, ns, remoting.ClientConfig{})
		if err != nil {
			return false
		}
		defer cl.Close()
		resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqGetBrokerClusterInfo, nil, nil))
		return err == nil && resp.Code == 0
	})
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("namesrv exited %d:\n%s", code, logs.String())
	}
	var errOut bytes.Buffer
	if code := run(context.Background(), []string{"namesrv", "--namesrv-listen", "127.0.0.1:0", "--bootstrap=" + addr}, &bytes.Buffer{}, &errOut); code != exitUsage {
		t.Fatalf("--bootstrap without --controller-listen exited %d: %s", code, errOut.String())
	}
}

// keel controller --http-listen serves the controller's metrics: a
// single-voter cluster acts as leader, and says so at /metrics.
func TestControllerHTTPMetrics(t *testing.T) {
	ports := reserveLoopbackPorts(t, 2)
	p := startControllerProc(t, t.TempDir(), ports[0], "--bootstrap="+ports[0], "--http-listen", ports[1])
	base := "http://" + ports[1]
	var body string
	waitFor(t, "the acting leader in /metrics", 30*time.Second, func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return strings.Contains(body, "\nkeel_controller_acting_leader 1\n")
	})
	for _, want := range []string{`keel_controller_raft_state{state="Leader"} 1`, "keel_controller_raft_voter 1",
		"keel_controller_raft_leader_known 1", `keel_controller_elections_total{kind="elect"} 0`, "keel_controller_groups 0",
		"keel_controller_groups_without_master 0", "go_goroutines "} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, "keel_store_") || strings.Contains(body, "keel_send_") {
		t.Error("a controller exports broker metrics")
	}
	if code, b := httpGet(t, base+"/healthz"); code != 200 || b != "ok\n" {
		t.Errorf("/healthz: %d %q", code, b)
	}
	if !strings.Contains(p.logs.String(), `msg="HTTP listening"`) {
		t.Errorf("no HTTP listening line in the log:\n%s", p.logs.String())
	}
}

// TestControllerSwitchOverHelp: the help says what the brokers do on a
// switch-over (they follow it), not that they ignore it.
func TestControllerSwitchOverHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"controller", "switch-over", "--help"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	help := out.String()
	for _, want := range []string{"restarts as its slave", "registers with the NameServers as brokerId 0", "Nothing acknowledged is lost"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "do not follow") {
		t.Errorf("help still says the brokers do not follow:\n%s", help)
	}
}
