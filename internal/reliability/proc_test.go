package reliability

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// keelProc runs `keel serve` as a child process on fixed loopback ports
// (chosen by the first start with port 0 and reused by every restart, so
// clients keep their addresses) and a data directory that outlives it.
type keelProc struct {
	t      *testing.T
	bin    string
	dir    string // data directory
	conf   string // broker.conf path
	nsAddr string
	brAddr string
	starts int

	cmd    *exec.Cmd
	log    string // stderr file of the current run
	exited chan error
}

func newKeelProc(t *testing.T, conf string) *keelProc {
	t.Helper()
	p := &keelProc{t: t, bin: keelBinary(t), dir: t.TempDir(), conf: conf}
	t.Cleanup(func() {
		if p.cmd != nil {
			p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

var (
	nsListenRE = regexp.MustCompile(`msg="NameServer listening" addr=(\S+)`)
	brListenRE = regexp.MustCompile(`msg="broker listening" addr=(\S+)`)
)

// start runs keel serve and waits until the broker listens.
func (p *keelProc) start() {
	t := p.t
	t.Helper()
	ns, br := "127.0.0.1:0", "127.0.0.1:0"
	if p.nsAddr != "" {
		ns, br = p.nsAddr, p.brAddr
	}
	// A killed process's ports can be busy for a moment; retry the start.
	for attempt := 0; ; attempt++ {
		err := p.startOnce(ns, br)
		if err == nil {
			break
		}
		if attempt >= 20 {
			t.Fatalf("keel serve (start %d): %v\n%s", p.starts, err, tail(p.logs(), 4000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.starts++
	// Clients look the broker up at the NameServer: wait for its registration.
	waitFor(t, 30*time.Second, "the broker to register", func() bool {
		resp, err := invoke(p.nsAddr, remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": "TBW102"}, nil)
		return err == nil && resp.Code == remoting.ResSuccess
	})
}

func (p *keelProc) startOnce(ns, br string) error {
	p.log = filepath.Join(p.t.TempDir(), fmt.Sprintf("keel-%d.log", p.starts))
	f, err := os.Create(p.log)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(p.bin, "serve", "-c", p.conf, "--data-dir", p.dir,
		"--namesrv-listen", ns, "--amqp-listen", "", "--broker-listen", br, "--kafka-listen", "", "--http-listen", "")
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var nsm, brm []string
	ok := poll(30*time.Second, func() bool {
		select {
		case err := <-exited:
			exited <- err
			return true
		default:
		}
		s := p.logs()
		nsm, brm = nsListenRE.FindStringSubmatch(s), brListenRE.FindStringSubmatch(s)
		return nsm != nil && brm != nil
	})
	if !ok || nsm == nil || brm == nil {
		cmd.Process.Kill()
		err := <-exited
		return fmt.Errorf("not listening (exit: %v)", err)
	}
	p.cmd, p.exited = cmd, exited
	if p.nsAddr == "" {
		p.nsAddr, p.brAddr = nsm[1], brm[1]
	}
	return nil
}

// logs returns the current run's output.
func (p *keelProc) logs() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *keelProc) kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatalf("SIGKILL: %v", err)
	}
	<-p.exited
	p.cmd = nil
}

// stop sends SIGTERM and expects a clean exit.
func (p *keelProc) stop() {
	t := p.t
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-p.exited:
		p.cmd = nil
		if err != nil {
			t.Fatalf("keel serve after SIGTERM: %v\n%s", err, tail(p.logs(), 4000))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("keel serve did not stop after SIGTERM\n%s", tail(p.logs(), 4000))
	}
}

// check runs `keel check` on the data directory and returns its exit code
// and output.
func (p *keelProc) check() (int, string) {
	p.t.Helper()
	out, err := exec.Command(p.bin, "check", "-c", p.conf, "--data-dir", p.dir).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		p.t.Fatalf("keel check: %v", err)
	}
	return 0, string(out)
}

// invoke sends one request to addr on a fresh connection.
func invoke(addr string, code int16, ext map[string]string, body []byte) (*remoting.Command, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Invoke(ctx, remoting.NewRequest(code, ext, body))
}

// createTopic creates topic with n queues on the broker and waits until
// the NameServer routes it.
func createTopic(t *testing.T, brAddr, nsAddr, topic string, n int) {
	t.Helper()
	q := fmt.Sprint(n)
	resp, err := invoke(brAddr, remoting.ReqUpdateAndCreateTopic, map[string]string{
		"topic": topic, "readQueueNums": q, "writeQueueNums": q, "perm": "6"}, nil)
	if err != nil || resp.Code != remoting.ResSuccess {
		t.Fatalf("create topic %s: %v %v", topic, resp, err)
	}
	waitFor(t, 30*time.Second, "route of "+topic, func() bool {
		resp, err := invoke(nsAddr, remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}, nil)
		return err == nil && resp.Code == remoting.ResSuccess
	})
}
