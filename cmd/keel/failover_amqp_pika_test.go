package main

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// pikaFailoverScript publishes 100 confirmed messages to a durable
// queue, acks the first 50 of their deliveries and holds the rest,
// prints "ready" and waits for a line on stdin (the master is killed
// meanwhile); then it reconnects through AMQP_ADDRS, publishes one
// message with a confirm (sent again while nacked) and consumes until it has every held message
// again (each with redelivered=True) and the new one; an acked message
// may come again only with redelivered=True. It prints "ok".
const pikaFailoverScript = `
import os, sys, time, pika
addrs = os.environ["AMQP_ADDRS"].split(",")
def connect():
    deadline, last = time.time() + 60, None
    while time.time() < deadline:
        for a in addrs:
            host, port = a.rsplit(":", 1)
            try:
                return pika.BlockingConnection(pika.ConnectionParameters(host=host, port=int(port), connection_attempts=1, socket_timeout=2))
            except Exception as e:
                last = e
        time.sleep(0.1)
    sys.exit("no member took the connection: %r" % (last,))
c = connect()
ch = c.channel()
ch.queue_declare("pika-jobs", durable=True)
ch.confirm_delivery()
for i in range(100):
    ch.basic_publish("", "pika-jobs", str(i).encode(), pika.BasicProperties(delivery_mode=2))
cch = c.channel()
cch.basic_qos(prefetch_count=200)
got = []
cch.basic_consume("pika-jobs", lambda _c, m, _p, body: got.append((m.delivery_tag, body.decode(), m.redelivered)), auto_ack=False)
deadline = time.time() + 30
while len(got) < 100 and time.time() < deadline:
    c.process_data_events(time_limit=0.2)
if len(got) != 100:
    sys.exit("got %d of the 100 messages before the kill" % len(got))
for tag, body, red in got:
    if red:
        sys.exit("first delivery of %s flagged redelivered" % body)
    if int(body) < 50:
        cch.basic_ack(tag)
c.process_data_events(time_limit=0.2)
print("ready", flush=True)
sys.stdin.readline()
c2 = connect()
ch2 = c2.channel()
ch2.queue_declare("pika-jobs", durable=True)
ch2.confirm_delivery()
deadline = time.time() + 30
while True:  # nacked while the new master has too few replicas in sync: send again
    try:
        ch2.basic_publish("", "pika-jobs", b"after", pika.BasicProperties(delivery_mode=2))
        break
    except pika.exceptions.NackError:
        if time.time() > deadline:
            sys.exit("the publish after the failover was never confirmed")
        time.sleep(0.05)
again = {}
ch2.basic_qos(prefetch_count=200)
def on_again(chan, m, _p, body):
    again.setdefault(body.decode(), m.redelivered)
    chan.basic_ack(m.delivery_tag)
ch2.basic_consume("pika-jobs", on_again, auto_ack=False)
want = set(str(i) for i in range(50, 100)) | {"after"}
deadline = time.time() + 30
while not want <= set(again) and time.time() < deadline:
    c2.process_data_events(time_limit=0.2)
if not want <= set(again):
    sys.exit("not delivered after the failover: %s" % sorted(want - set(again)))
for body, red in again.items():
    if body == "after":
        continue
    if not red:
        sys.exit("%s delivered again without redelivered=True" % body)
    if int(body) >= 100:
        sys.exit("phantom %s" % body)
print("ok %d acked messages delivered again" % sum(1 for b in again if b != "after" and int(b) < 50), flush=True)
`

// TestControllerFailoverAMQPPika is TestControllerFailoverAMQPKill9's
// check with Debian's python3-pika: across kill -9 of the master the
// client reconnects through the members' addresses, finds its durable
// queue on the new master with every held delivery again
// (redelivered=True), and publishes with a confirm.
func TestControllerFailoverAMQPPika(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	if err := exec.Command(pythonWithPika, "-c", "import pika").Run(); err != nil {
		t.Skipf("SKIPPED: %s cannot import pika (install Debian's python3-pika): %v", pythonWithPika, err)
	}
	brokers, amqpAddrs, group := doorFailoverCluster(t, "--amqp-listen")
	g := waitMasterElected(t, brokers, group)
	oldMaster := brokerOf(t, brokers, g, g.MasterID)
	waitOrDump(t, brokers, "the master's AMQP door", 20*time.Second, func() bool {
		c, _, err := dialAnyAMQP(amqpAddrs)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	cmd := exec.Command(pythonWithPika, "-c", pikaFailoverScript)
	cmd.Env = append(os.Environ(), "AMQP_ADDRS="+strings.Join(amqpAddrs, ","))
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 4)
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	next := func(what string) string {
		select {
		case l, ok := <-lines:
			if !ok {
				cmd.Wait()
				t.Fatalf("the pika client ended before %s:\n%s", what, stderr.String())
			}
			return l
		case <-time.After(90 * time.Second):
			t.Fatalf("no %s from the pika client in 90 s:\n%s", what, stderr.String())
		}
		return ""
	}
	if l := next("ready"); l != "ready" {
		t.Fatalf("pika client: %q, want ready\n%s", l, stderr.String())
	}
	if err := brokers[oldMaster].proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-brokers[oldMaster].proc.exited
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	l := next("its result")
	if !strings.HasPrefix(l, "ok") {
		dumpBrokers(t, brokers)
		t.Fatalf("pika client: %q\n%s", l, stderr.String())
	}
	t.Logf("pika across kill -9 of the master: %s", l)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("pika client: %v\n%s", err, stderr.String())
	}
}
