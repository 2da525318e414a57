package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/remoting"
)

// TestExamples builds the programs under examples/ and runs each against a
// `keel serve` on free ports, as the README tells a reader to: every one
// must exit 0 and print its closing "done:" line.
func TestExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example programs")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the examples")
	}
	bin := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"producer", "batch", "consumer", "pullconsumer", "orderly", "delay"}
	build := exec.Command(goBin, append([]string{"build", "-o", bin + string(filepath.Separator)}, examplePkgs(names)...)...)
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build examples: %v\n%s", err, out)
	}

	ns := startServe(t, "").namesrv // the embedded defaults, as in the README
	// A new consumer group's %RETRY% topic is created by its first
	// heartbeat, after the Go client looked up its routes; the client then
	// learns the route on its next 30 s refresh. Create it up front so the
	// consumer example's redeliveries start at once.
	createTopic(t, ns, "%RETRY%example-consumer")

	for _, tc := range []struct {
		name string
		args []string
	}{
		{"producer", []string{"-count", "5"}},
		{"batch", nil},
		{"consumer", []string{"-timeout", "45s"}},
		{"pullconsumer", []string{"-timeout", "30s"}},
		{"orderly", []string{"-orders", "3", "-timeout", "30s"}},
		{"delay", []string{"-level", "1", "-after", "1s", "-timeout", "30s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, filepath.Join(bin, tc.name), append([]string{"-n", ns}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", tc.name, err, out)
			}
			if !strings.Contains(string(out), "done:") {
				t.Fatalf("%s exited 0 without its done line:\n%s", tc.name, out)
			}
			t.Logf("%s output:\n%s", tc.name, out)
		})
	}
}

func examplePkgs(names []string) []string {
	pkgs := make([]string, len(names))
	for i, n := range names {
		pkgs[i] = "./examples/" + n
	}
	return pkgs
}

// createTopic creates topic with one queue and waits until the NameServer
// routes it.
func createTopic(t *testing.T, ns, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := admin.New(admin.Config{NamesrvAddrs: []string{ns}})
	defer c.Close()
	if err := c.CreateTopic(ctx, admin.TopicSpec{Topic: topic, ReadQueues: 1, WriteQueues: 1, Perm: 6}); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
	waitFor(t, "the NameServer to route "+topic, 30*time.Second, func() bool {
		cl, err := remoting.Dial(ctx, ns, remoting.ClientConfig{})
		if err != nil {
			return false
		}
		defer cl.Close()
		resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}, nil))
		return err == nil && resp.Code == remoting.ResSuccess
	})
}

// TestExampleWrongNamesrv: an example pointed at the broker's port says
// that it is a broker, not only the client's "route info not found"; and
// its -h names each default once.
func TestExampleWrongNamesrv(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs an example program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the examples")
	}
	bin := filepath.Join(t.TempDir(), "producer")
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	build := exec.Command(goBin, "build", "-o", bin, "./examples/producer")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	help, _ := exec.Command(bin, "-h").CombinedOutput()
	if strings.Count(string(help), "127.0.0.1:9876") != 1 {
		t.Errorf("-h names the default NameServer %d times:\n%s", strings.Count(string(help), "127.0.0.1:9876"), help)
	}
	c := startServe(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-n", c.broker, "-count", "1").CombinedOutput()
	want := "-n " + c.broker + " is not a NameServer (it looks like a broker)"
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("producer -n <broker>: %v, output:\n%s\nwant %q", err, out, want)
	}
}
