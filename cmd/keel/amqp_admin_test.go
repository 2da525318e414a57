package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/admin"
)

// startServeAMQP is startServe with the AMQP listener on a free loopback
// port; it returns the cluster and the AMQP address.
func startServeAMQP(t *testing.T) (*cluster, string) {
	t.Helper()
	path := writeConf(t, "brokerName=broker-a\nmapedFileSizeCommitLog=16777216\n")
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	dataDir := t.TempDir()
	go func() {
		done <- run(ctx, []string{"serve", "-c", path, "--data-dir", dataDir, "--namesrv-listen", "127.0.0.1:0",
			"--amqp-listen", "127.0.0.1:0", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "127.0.0.1:0"},
			&bytes.Buffer{}, logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not stop:\n%s", logs.String())
		}
	})
	c := &cluster{t: t, namesrv: namesrvAddrFromLogs(t, logs), logs: logs, dataDir: dataDir}
	waitFor(t, "the broker to register", 30*time.Second, func() bool { return brokerRegistered(t, c.namesrv, "broker-a") })
	var addr string
	waitFor(t, "the AMQP listener", 10*time.Second, func() bool {
		if m := amqpListenRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	return c, addr
}

// TestAMQPQueuesInAdminAndMetrics: AMQP queues and exchanges appear in
// `keel amqp queues` / `exchanges` (over the broker's admin request) and in
// /metrics, with their depth, unacked messages, consumers and counters.
func TestAMQPQueuesInAdminAndMetrics(t *testing.T) {
	c, addr := startServeAMQP(t)
	conn, err := amqp091.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("orders", true, false, false, false, amqp091.Table{"x-queue-type": "quorum", "x-max-length": int32(100)}); err != nil {
		t.Fatal(err)
	}
	if err := ch.ExchangeDeclare("events", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind("orders", "order.#", "events", false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"a", "b", "c"} {
		dc, err := ch.PublishWithDeferredConfirm("events", "order.new", false, false, amqp091.Publishing{Body: []byte(body), DeliveryMode: 2})
		if err != nil || !dc.Wait() {
			t.Fatalf("publish: %v", err)
		}
	}
	if _, ok, err := ch.Get("orders", false); err != nil || !ok { // one unacked
		t.Fatalf("get: %v %v", ok, err)
	}

	var out []admin.BrokerAMQP
	c.okJSON(&out, "amqp", "queues")
	if len(out) != 1 || !out[0].Enabled || len(out[0].Queues) != 1 {
		t.Fatalf("keel amqp queues: %+v", out)
	}
	q := out[0].Queues[0]
	if q.Vhost != "/" || q.Name != "orders" || q.Type != "quorum" || q.Ready != 2 || q.Unacked != 1 || q.Published != 3 || q.Delivered != 1 ||
		q.MaxLength != 100 || q.OldestUnsettledAgeMs < 0 {
		t.Fatalf("orders: %+v", q)
	}
	table := c.ok("amqp", "queues")
	if !strings.Contains(table, "orders") || !strings.Contains(table, "LIM=100") {
		t.Fatalf("table:\n%s", table)
	}
	if ex := c.ok("amqp", "exchanges"); !strings.Contains(ex, "events") || !strings.Contains(ex, "amq.headers") {
		t.Fatalf("keel amqp exchanges:\n%s", ex)
	}
	// The connection, with its user, vhost and channel.
	if cs := c.ok("amqp", "connections"); !regexp.MustCompile(`(?m)^broker-a\s+127\.0\.0\.1:\d+\s+guest\s+/\s+1\s`).MatchString(cs) {
		t.Errorf("keel amqp connections:\n%s", cs)
	}

	resp, err := http.Get(c.httpBase() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`keel_amqp_queue_messages_ready{queue="orders",vhost="/"} 2`,
		`keel_connections{door="amqp"} 1`, `keel_send_requests_total{door="amqp",result="SUCCESS",topic="_other"} 3`,
		`keel_deliver_messages_total{door="amqp",topic="_other"} 1`, `keel_amqp_queue_messages_unacked{queue="orders",vhost="/"} 1`,
		`keel_amqp_queue_published_total{queue="orders",vhost="/"} 3`, `keel_amqp_queue_consumers{queue="orders",vhost="/"} 0`,
		`keel_amqp_queue_oldest_unsettled_age_seconds{queue="orders",vhost="/"}`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestAMQPGoExample builds examples/amqpconfirms and runs it against keel
// serve: every message confirmed, consumed and acknowledged.
func TestAMQPGoExample(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs an example program")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the example")
	}
	bin := filepath.Join(t.TempDir(), "amqpconfirms")
	build := exec.Command(goBin, "build", "-o", bin, "./examples/amqpconfirms")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	_, addr := startServeAMQP(t)
	out, err := exec.Command(bin, "-url", "amqp://guest:guest@"+addr+"/", "-count", "20", "-timeout", "30s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "done: 20 messages confirmed, consumed and acknowledged") {
		t.Fatalf("amqpconfirms: %v\n%s", err, out)
	}
}
