package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// TestMain lets the test binary act as the keel binary for subprocess
// tests: with KEEL_TEST_MAIN=1 it runs main.
func TestMain(m *testing.M) {
	if r := os.Getenv(relayEnv); r != "" {
		runRelay(r)
		return
	}
	if os.Getenv("KEEL_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// prepend puts text before what was written.
func (s *syncBuffer) prepend(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rest := s.b.String()
	s.b.Reset()
	s.b.WriteString(text)
	s.b.WriteString(rest)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var listenRE = regexp.MustCompile(`msg="NameServer listening" addr=(\S+)`)

// waitFor polls cond until it returns true or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// namesrvAddrFromLogs waits for the NameServer's listen line.
func namesrvAddrFromLogs(t *testing.T, logs *syncBuffer) string {
	t.Helper()
	var addr string
	waitFor(t, "the NameServer to listen", 30*time.Second, func() bool {
		m := listenRE.FindStringSubmatch(logs.String())
		if m != nil {
			addr = strings.Replace(m[1], "[::]", "127.0.0.1", 1)
		}
		return m != nil
	})
	return addr
}

// brokerRegistered asks the NameServer at addr for cluster info and reports
// whether brokerName appears.
func brokerRegistered(t *testing.T, addr, brokerName string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{})
	if err != nil {
		return false
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqGetBrokerClusterInfo, nil, nil))
	return err == nil && resp.Code == 0 && bytes.Contains(resp.Body, []byte(brokerName))
}

func TestServeRegistersAndShutsDown(t *testing.T) {
	dir := t.TempDir()
	conf := writeConf(t, "brokerName=broker-test\nflushDiskType=ASYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-c", conf, "--data-dir", dir,
			"--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "127.0.0.1:0"}, &stdout, &logs)
	}()
	addr := namesrvAddrFromLogs(t, &logs)
	waitFor(t, "the broker to register", 30*time.Second, func() bool { return brokerRegistered(t, addr, "broker-test") })
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("serve exited %d:\n%s", code, logs.String())
		}
	case <-time.After(shutdownTimeout + 5*time.Second):
		t.Fatalf("serve did not shut down:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "commitlog")); err != nil {
		t.Errorf("store not created under --data-dir: %v", err)
	}
}

func TestServeStoreLockedFails(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan int, 1)
	args := []string{"serve", "--data-dir", dir, "--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "127.0.0.1:0"}
	go func() { done <- run(ctx, args, &bytes.Buffer{}, &logs) }()
	namesrvAddrFromLogs(t, &logs)

	var second bytes.Buffer
	code := run(context.Background(), args, &bytes.Buffer{}, &second)
	if code != exitError || !strings.Contains(second.String(), "lock") {
		t.Errorf("second serve on the same data dir: code %d, stderr %q", code, second.String())
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("first serve exited %d:\n%s", code, logs.String())
	}
}

// TestSIGTERMShutsDownCleanly runs keel serve as a child process and stops
// it with SIGTERM.
func TestSIGTERMShutsDownCleanly(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", dir, "--namesrv-listen", "127.0.0.1:0",
		"--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "127.0.0.1:0", "-c", writeConf(t, "mapedFileSizeCommitLog=16777216\n"))
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	addr := namesrvAddrFromLogs(t, &logs)
	waitFor(t, "the broker to register", 30*time.Second, func() bool { return brokerRegistered(t, addr, "broker-a") })
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("keel serve after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(shutdownTimeout + 5*time.Second):
		t.Fatalf("keel serve did not exit after SIGTERM:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "shutting down") {
		t.Errorf("no shutdown log:\n%s", logs.String())
	}
}
