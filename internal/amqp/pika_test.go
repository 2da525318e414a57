package amqp

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// pythonWithPika is Debian's python3 with python3-pika (.ci/run installs it).
const pythonWithPika = "/usr/bin/python3"

// TestPikaFeatures runs testdata/pika_features.py (headers exchange, TTL
// and dead-lettering with x-death, reject-publish nacks, delivery limit)
// with Debian's python3-pika against the broker.
func TestPikaFeatures(t *testing.T) { runPika(t, "testdata/pika_features.py") }

// TestPikaTx runs testdata/pika_tx.py (tx_select, tx_commit, tx_rollback
// of publishes and acks; confirms refused on a tx channel).
func TestPikaTx(t *testing.T) { runPika(t, "testdata/pika_tx.py") }

// TestPikaQueueFeatures runs testdata/pika_queue_features.py (message
// and consumer priorities, single active consumer, x-delivery-count,
// x-max-length-bytes with reject-publish-dlx).
func TestPikaQueueFeatures(t *testing.T) { runPika(t, "testdata/pika_queue_features.py") }

func runPika(t *testing.T, script string) {
	if err := exec.Command(pythonWithPika, "-c", "import pika").Run(); err != nil {
		t.Skipf("SKIPPED: %s cannot import pika (install Debian's python3-pika): %v", pythonWithPika, err)
	}
	b := startBroker(t)
	host, port, _ := net.SplitHostPort(b.addr)
	c := exec.Command(pythonWithPika, script)
	c.Env = append(os.Environ(), "AMQP_HOST="+host, "AMQP_PORT="+port)
	out, err := c.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
}
