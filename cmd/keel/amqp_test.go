package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// pythonWithPika is Debian's python3 with python3-pika (.ci/run installs it).
const pythonWithPika = "/usr/bin/python3"

func needPika(t *testing.T) {
	t.Helper()
	if err := exec.Command(pythonWithPika, "-c", "import pika").Run(); err != nil {
		t.Skipf("SKIPPED: %s cannot import pika (install Debian's python3-pika): %v", pythonWithPika, err)
	}
}

var amqpListenRE = regexp.MustCompile(`msg="amqp listening" addr=(\S+)`)

// startServeProc runs keel serve as a child process on dir with the AMQP
// listener on a free loopback port and returns it with that address.
func startServeProc(t *testing.T, dir string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	logs := &syncBuffer{}
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", dir, "--namesrv-listen", "127.0.0.1:0",
		"--amqp-listen", "127.0.0.1:0", "--kafka-listen", "", "--broker-listen", "127.0.0.1:0", "--http-listen", "",
		"-c", writeConf(t, "mapedFileSizeCommitLog=16777216\n"))
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var addr string
	waitFor(t, "the AMQP listener", 30*time.Second, func() bool {
		m := amqpListenRE.FindStringSubmatch(logs.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	return cmd, addr, logs
}

func runPika(t *testing.T, addr, script string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	c := exec.Command(pythonWithPika, "../../examples/amqp/"+script)
	c.Env = append(os.Environ(), "AMQP_HOST="+host, "AMQP_PORT="+port)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", script, err, out)
	}
	return string(out)
}

// TestAMQPPikaDurableQueueSurvivesKill9 is the AMQP door's definition of done:
// the canonical pika program runs unchanged against keel serve, and the
// message it published (confirmed) is there after kill -9 and a restart.
func TestAMQPPikaDurableQueueSurvivesKill9(t *testing.T) {
	needPika(t)
	dir := t.TempDir()
	cmd, addr, logs := startServeProc(t, dir)
	if out := runPika(t, addr, "durable_publish.py"); !strings.Contains(out, "Sent") {
		t.Fatalf("publisher said %q", out)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	_, addr, logs = startServeProc(t, dir)
	out := runPika(t, addr, "consume_ack.py")
	if strings.TrimSpace(out) != "Hello, durable queue! delivery_mode=2 redelivered=False" {
		t.Fatalf("after kill -9 and restart the consumer printed %q\n%s", out, logs.String())
	}
	if out := runPika(t, addr, "consume_ack.py"); strings.TrimSpace(out) != "" {
		t.Fatalf("the acked message came back: %q", out)
	}
}

// TestAMQPConfirmedMessagesSurviveKill9: amqp091-go publishes persistent
// messages with confirms to keel serve while it is killed with SIGKILL;
// after a restart every confirmed message is in the queue.
func TestAMQPConfirmedMessagesSurviveKill9(t *testing.T) {
	dir := t.TempDir()
	cmd, addr, _ := startServeProc(t, dir)
	conn, err := amqp091.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("confirmed", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	const window = 32
	confirmed := map[string]bool{}
	var pending []*amqp091.DeferredConfirmation
	var bodies []string
	killAt := 300
	for i := 0; ; i++ {
		if i == killAt {
			cmd.Process.Signal(syscall.SIGKILL)
		}
		body := fmt.Sprintf("m-%05d", i)
		dc, err := ch.PublishWithDeferredConfirm("", "confirmed", false, false, amqp091.Publishing{DeliveryMode: 2, Body: []byte(body)})
		if err != nil {
			break // the broker is gone
		}
		pending, bodies = append(pending, dc), append(bodies, body)
		if len(pending) == window {
			if !pending[0].Wait() {
				break
			}
			confirmed[bodies[0]] = true
			pending, bodies = pending[1:], bodies[1:]
		}
	}
	for i, dc := range pending {
		select {
		case <-dc.Done():
			if dc.Acked() {
				confirmed[bodies[i]] = true
			}
		default:
		}
	}
	cmd.Wait()
	conn.Close()
	if len(confirmed) < killAt-window {
		t.Fatalf("only %d confirmed before the kill", len(confirmed))
	}
	_, addr, _ = startServeProc(t, dir)
	conn, err = amqp091.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, _ = conn.Channel()
	found := 0
	for {
		d, ok, err := ch.Get("confirmed", true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		if confirmed[string(d.Body)] {
			found++
		}
	}
	if found != len(confirmed) {
		t.Fatalf("%d of %d confirmed messages survived kill -9", found, len(confirmed))
	}
	t.Logf("%d confirmed before kill -9, all present after restart", len(confirmed))
}

// pikaScenario is a pika program checking what pika's BlockingChannel
// depends on: confirm_delivery (the capabilities), mandatory publishes
// raising UnroutableError (basic.return before basic.ack), basic_get,
// basic_nack multiple+requeue with redelivered set, and a consumer with
// manual acks and prefetch.
const pikaScenario = `
import os, sys, pika
conn = pika.BlockingConnection(pika.ConnectionParameters(host=os.environ['AMQP_HOST'], port=int(os.environ['AMQP_PORT'])))
ch = conn.channel()
ch.confirm_delivery()
ch.queue_declare(queue='scenario', durable=True)
try:
    ch.basic_publish(exchange='', routing_key='no-such-queue', body='x', mandatory=True)
    sys.exit('unroutable mandatory publish did not raise')
except pika.exceptions.UnroutableError:
    pass
for i in range(3):
    ch.basic_publish(exchange='', routing_key='scenario', body='m%d' % i, properties=pika.BasicProperties(delivery_mode=2))
got = [ch.basic_get('scenario') for _ in range(3)]
assert [b for (_, _, b) in got] == [b'm0', b'm1', b'm2'], got
assert not any(m.redelivered for (m, _, _) in got)
ch.basic_nack(got[1][0].delivery_tag, multiple=True, requeue=True)
m, _, b = ch.basic_get('scenario', auto_ack=True)
assert (b, m.redelivered) == (b'm0', True), (b, m.redelivered)
ch.basic_qos(prefetch_count=1)
seen = []
def on_message(c, method, props, body):
    seen.append((body, method.redelivered))
    c.basic_ack(method.delivery_tag)
    c.stop_consuming()
ch.basic_consume('scenario', on_message)
ch.start_consuming()
assert seen == [(b'm1', True)], seen
ch.basic_ack(got[2][0].delivery_tag)
q = ch.queue_declare(queue='scenario', passive=True)
assert q.method.message_count == 0, q.method.message_count
conn.close()
print('ok')
`

func TestAMQPPikaScenario(t *testing.T) {
	needPika(t)
	_, addr, logs := startServeProc(t, t.TempDir())
	host, port, _ := net.SplitHostPort(addr)
	c := exec.Command(pythonWithPika, "-c", pikaScenario)
	c.Env = append(os.Environ(), "AMQP_HOST="+host, "AMQP_PORT="+port)
	out, err := c.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("pika scenario: %v\n%s\n%s", err, out, logs.String())
	}
}
