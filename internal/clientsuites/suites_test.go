package clientsuites

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// runSuite runs scripts/NAME from the repository root with a deadline and
// fails the test, with the script's output, if the suite fails.
func runSuite(t *testing.T, name string, budget time.Duration) {
	t.Helper()
	if testing.Short() {
		t.Skip("a client project's whole suite; not with -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
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

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// TestFranzGoSuite runs franz-go's own pkg/kgo integration tests against
// Keel's Kafka front door (issue 17).
func TestFranzGoSuite(t *testing.T) {
	runSuite(t, "kafka-suite.sh", 8*time.Minute)
}

// TestAMQP091Suite runs amqp091-go's own integration tests against Keel's
// AMQP 0-9-1 front door (issue 18).
func TestAMQP091Suite(t *testing.T) {
	runSuite(t, "amqp-suite.sh", 5*time.Minute)
}
