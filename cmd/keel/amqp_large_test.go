package main

import (
	"bytes"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// BenchmarkAMQPLargeMessage: a `keel serve` process (SYNC_FLUSH,
// amqpMaxMessageSize 100 MiB, 256 MiB CommitLog segments) takes one
// 100 MiB persistent message from amqp091-go with a confirm and delivers
// it back to a consumer with a manual ack; every delivered body is checked
// against the published one. Reported: the round trip's MB/s and the
// broker process's peak resident memory (VmHWM, broker-peak-RSS-MiB) and
// its resident memory before the first message (broker-idle-RSS-MiB).
//
//	go test -run '^$' -bench BenchmarkAMQPLargeMessage -benchtime 5x ./cmd/keel
func BenchmarkAMQPLargeMessage(b *testing.B) {
	const size = 100 << 20
	dir := b.TempDir()
	conf := filepath.Join(dir, "broker.conf")
	if err := os.WriteFile(conf, []byte("mapedFileSizeCommitLog=268435456\namqpMaxMessageSize=104857600\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	logs := &syncBuffer{}
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", filepath.Join(dir, "data"), "--namesrv-listen", "127.0.0.1:0",
		"--amqp-listen", "127.0.0.1:0", "--kafka-listen", "", "--broker-listen", "127.0.0.1:0", "--http-listen", "", "-c", conf)
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var addr string
	for deadline := time.Now().Add(30 * time.Second); addr == ""; {
		if m := amqpListenRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("no AMQP listener:\n%s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	c, err := amqp091.Dial("amqp://guest:guest@" + addr + "/")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := ch.QueueDeclare("big", true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	if err := ch.Qos(1, 0, false); err != nil {
		b.Fatal(err)
	}
	msgs, err := ch.Consume("big", "", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i * 7 / 3)
	}
	sum := sha256.Sum256(body)
	idle := procStatusKiB(b, cmd.Process.Pid, "VmRSS")
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		dc, err := ch.PublishWithDeferredConfirm("", "big", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: body})
		if err != nil {
			b.Fatal(err)
		}
		if !dc.Wait() {
			b.Fatal("the 100 MiB message was nacked")
		}
		select {
		case d := <-msgs:
			if sha256.Sum256(d.Body) != sum {
				b.Fatalf("delivered %d bytes that differ from the %d published", len(d.Body), size)
			}
			d.Ack(false)
		case <-time.After(time.Minute):
			b.Fatal("the 100 MiB message was not delivered")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(idle)/1024, "broker-idle-RSS-MiB")
	b.ReportMetric(float64(procStatusKiB(b, cmd.Process.Pid, "VmHWM"))/1024, "broker-peak-RSS-MiB")
}

// procStatusKiB reads a "Key: N kB" line of /proc/PID/status.
func procStatusKiB(b *testing.B, pid int, key string) int64 {
	st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range bytes.Split(st, []byte("\n")) {
		if k, v, ok := strings.Cut(string(l), ":"); ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}
