package amqp

import (
	"bufio"
	"io"
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

// TestPikaTxGroups runs testdata/pika_tx_groups.py: a transaction of
// pika's over a queue here and one on another group (rollback, commit,
// and a commit with the other group's broker stopped).
func TestPikaTxGroups(t *testing.T) {
	if err := exec.Command(pythonWithPika, "-c", "import pika").Run(); err != nil {
		t.Skipf("SKIPPED: %s cannot import pika (install Debian's python3-pika): %v", pythonWithPika, err)
	}
	a, b := startPair(t)
	host, port, _ := net.SplitHostPort(a.addr)
	_, bport, _ := net.SplitHostPort(b.addr)
	c := exec.Command(pythonWithPika, "testdata/pika_tx_groups.py")
	c.Env = append(os.Environ(), "AMQP_HOST="+host, "AMQP_PORT="+port, "B_PORT="+bport)
	in, err := c.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outp, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(outp)
	line, err := r.ReadString('\n')
	if err != nil || line != "stop b\n" {
		c.Wait()
		t.Fatalf("before stopping b: %q %v\n%s", line, err, stderr.String())
	}
	b.crash()
	in.Write([]byte("go\n"))
	rest, _ := io.ReadAll(r)
	if err := c.Wait(); err != nil || strings.TrimSpace(string(rest)) != "ok" {
		t.Fatalf("%v\n%s%s", err, rest, stderr.String())
	}
}
