package clientsuites

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// runSuite runs scripts/NAME from the repository root with a deadline and
// fails the test, with the script's output, if the suite fails. The suite
// is the source of module (at the version go.mod requires): when it is
// neither in the module cache nor downloadable (offline, the module proxy
// unreachable) the test is skipped with one line saying so.
func runSuite(t *testing.T, name, module string, budget time.Duration) {
	t.Helper()
	if testing.Short() {
		t.Skip("a client project's whole suite; not with -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if why := suiteSource(root, module, os.Environ()); why != "" {
		t.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", name))
	cmd.Dir = root
	cmd.Env = os.Environ()
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("%s:\n%s", name, tail(out, 4000))
	if ctx.Err() != nil {
		t.Fatalf("%s did not finish within %s", name, budget)
	}
	if err != nil {
		t.Fatalf("%s failed: %v", name, err)
	}
}

// sourceDownloadBudget bounds the download of a suite's module source.
const sourceDownloadBudget = 2 * time.Minute

// suiteSource makes sure the source of module, at the version go.mod in
// root requires, is in the module cache: first without the network
// (GOPROXY=off), else downloading it as env says. It returns "" when the
// source is there, else why it is not, in one line.
func suiteSource(root, module string, env []string) string {
	ctx, cancel := context.WithTimeout(context.Background(), sourceDownloadBudget)
	defer cancel()
	goCmd := func(extraEnv []string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir, cmd.Env = root, append(slices.Clone(env), extraEnv...)
		cmd.WaitDelay = 5 * time.Second
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			var dl struct{ Error string }
			if json.Unmarshal(out, &dl) == nil && dl.Error != "" {
				return nil, errors.New(dl.Error)
			}
			if msg := strings.TrimSpace(stderr.String()); msg != "" {
				err = errors.New(lastLine(msg))
			}
		}
		return out, err
	}
	version, err := goCmd(nil, "list", "-m", "-f", "{{.Version}}", module)
	if err != nil {
		return fmt.Sprintf("the %s suite needs the module's version from go.mod: %v", module, err)
	}
	at := module + "@" + strings.TrimSpace(string(version))
	if _, err := goCmd([]string{"GOPROXY=off"}, "mod", "download", "-json", at); err == nil {
		return ""
	}
	if _, err := goCmd(nil, "mod", "download", "-json", at); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", sourceDownloadBudget)
		}
		return fmt.Sprintf("the source of %s is not in the module cache and cannot be downloaded (module proxy unreachable?): %v", at, err)
	}
	return ""
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// TestFranzGoSuite runs franz-go's own pkg/kgo integration tests against
// Keel's Kafka front door.
func TestFranzGoSuite(t *testing.T) {
	runSuite(t, "kafka-suite.sh", "github.com/twmb/franz-go", 8*time.Minute)
}

// TestAMQP091Suite runs amqp091-go's own integration tests against Keel's
// AMQP 0-9-1 front door.
func TestAMQP091Suite(t *testing.T) {
	runSuite(t, "amqp-suite.sh", "github.com/rabbitmq/amqp091-go", 5*time.Minute)
}

// TestSuiteSourceOffline: with the module neither in the cache nor
// downloadable, the suite is skipped with one line naming the module, not
// failed; with it in the cache, it runs.
func TestSuiteSourceOffline(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	if why := suiteSource(root, "github.com/rabbitmq/amqp091-go", env); why != "" {
		t.Skipf("this machine's module cache cannot serve the check: %s", why)
	}
	// An empty module cache, no proxy: go.mod's graph cannot even load.
	offline := append(os.Environ(), "GOMODCACHE="+t.TempDir(), "GOPROXY=off", "GOFLAGS=-mod=mod")
	why := suiteSource(root, "github.com/rabbitmq/amqp091-go", offline)
	if why == "" || strings.Contains(why, "\n") || !strings.Contains(why, "github.com/rabbitmq/amqp091-go") {
		t.Fatalf("offline: %q, want one line naming the module", why)
	}
}
