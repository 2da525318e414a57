package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

var kafkaListenRE = regexp.MustCompile(`msg="Kafka listening" .*?addr=(\S+)`)

// TestServeKafka: `keel serve --kafka-listen` serves a Kafka producer
// (acks=all, zstd) and a consumer through the same store as the RocketMQ
// door, and the Kafka-created topic is one of the broker's topics; `keel
// check` finds the store with its Kafka batches sound.
func TestServeKafka(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, logs syncBuffer
	done := make(chan int, 1)
	dir := t.TempDir()
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", dir, "--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "",
			"--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", ""}, &stdout, &logs)
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not shut down:\n%s", logs.String())
		}
	}
	defer stop()
	var addr string
	waitFor(t, "the Kafka listener", 30*time.Second, func() bool {
		if m := kafkaListenRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()), kgo.AllowAutoTopicCreation(),
		kgo.ConsumeTopics("serve-kafka"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	for i := range 20 {
		if err := cl.ProduceSync(pctx, &kgo.Record{Topic: "serve-kafka", Value: []byte{byte('a' + i)}}).FirstErr(); err != nil {
			t.Fatalf("produce %d: %v", i, err)
		}
	}
	seen := 0
	for seen < 20 {
		fs := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatalf("consumed %d of 20", seen)
		}
		fs.EachError(func(tp string, p int32, err error) { t.Fatalf("fetch %s/%d: %v", tp, p, err) })
		seen += len(fs.Records())
	}
	if !strings.Contains(logs.String(), `msg="topic created" component=core topic=serve-kafka`) {
		t.Errorf("the Kafka topic was not created in the core:\n%s", logs.String())
	}
	cl.Close()
	stop()
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"check", "--data-dir", dir}, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "OK") {
		t.Fatalf("keel check after Kafka traffic: exit %d\n%s%s", code, out.String(), errOut.String())
	}
}

// TestServeKafkaListenInUse: a busy Kafka address fails the start naming
// the flag.
func TestServeKafkaListenInUse(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var logs syncBuffer
	code := run(context.Background(), []string{"serve", "--data-dir", t.TempDir(), "--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "",
		"--broker-listen", "127.0.0.1:0", "--http-listen", "", "--kafka-listen", busy.Addr().String()}, &syncBuffer{}, &logs)
	want := "Kafka listener cannot listen on " + busy.Addr().String() + ": address already in use (choose another address with --kafka-listen or kafkaListen in broker.conf)"
	if code == 0 || !strings.Contains(logs.String(), want) {
		t.Fatalf("exit %d, logs:\n%s\nwant %q", code, logs.String(), want)
	}
}

// TestKafkaAdvertised: what Metadata tells clients to dial.
// TestKafkaAdvertisesLoopbackToNetwork: a Kafka listener on every
// interface that advertises 127.0.0.1 (no kafkaAdvertisedListen nor
// brokerIP1) is the case the start warns about; loopback listeners and
// real advertised hosts are not.
func TestKafkaAdvertisesLoopbackToNetwork(t *testing.T) {
	all := &net.TCPAddr{IP: net.IPv4zero, Port: 9092}
	lo := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9092}
	host, _, err := kafkaAdvertised("", "", ":9092")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		bound net.Addr
		host  string
		want  bool
	}{{all, host, true}, {all, "localhost", true}, {all, "10.0.0.5", false}, {lo, "127.0.0.1", false}} {
		if got := advertisesLoopbackToNetwork(c.bound, c.host); got != c.want {
			t.Errorf("bound %v advertising %s: %v, want %v", c.bound, c.host, got, c.want)
		}
	}
}

func TestKafkaAdvertised(t *testing.T) {
	for _, c := range []struct {
		adv, ip1, listen, host string
		port                   int32
	}{
		{"", "", "127.0.0.1:9092", "127.0.0.1", 9092},
		{"", "", ":9092", "127.0.0.1", 9092},
		{"", "10.1.2.3", ":9092", "10.1.2.3", 9092},
		{"kafka.example:19092", "10.1.2.3", ":9092", "kafka.example", 19092},
		{"", "", "127.0.0.1:0", "127.0.0.1", 0},
	} {
		h, p, err := kafkaAdvertised(c.adv, c.ip1, c.listen)
		if err != nil || h != c.host || p != c.port {
			t.Errorf("kafkaAdvertised(%q, %q, %q) = %s %d %v, want %s %d", c.adv, c.ip1, c.listen, h, p, err, c.host, c.port)
		}
	}
}

// TestServeKafkaMetricsLag: /metrics counts a Kafka group's lag in records,
// not in the batches (entries) the queue holds, and the Kafka door's
// produces and connections in the shared series under door="kafka".
func TestServeKafkaMetricsLag(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, logs syncBuffer
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", tempDir, "--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "",
			"--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, &stdout, &logs)
	}()
	defer func() {
		cancel()
		<-done
	}()
	var addr, httpAddr string
	waitFor(t, "the Kafka and HTTP listeners", 30*time.Second, func() bool {
		if m := kafkaListenRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		if m := httpListenRE.FindStringSubmatch(logs.String()); m != nil {
			httpAddr = m[1]
		}
		return addr != "" && httpAddr != ""
	})
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	if _, err := adm.CreateTopic(pctx, 1, 1, nil, "lagged"); err != nil {
		t.Fatal(err)
	}
	for b := range 3 { // three batches of ten records
		var rs []*kgo.Record
		for i := range 10 {
			rs = append(rs, &kgo.Record{Topic: "lagged", Value: []byte{byte(b), byte(i)}})
		}
		if err := cl.ProduceSync(pctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	var os kadm.Offsets
	os.AddOffset("lagged", 0, 5, -1)
	if _, err := adm.CommitOffsets(pctx, "lg", os); err != nil {
		t.Fatal(err)
	}
	wants := []string{`keel_consumer_group_lag{group="lg",topic="lagged"} 25`,
		`keel_send_requests_total{door="kafka",result="SUCCESS",topic="lagged"} 3`,
		`keel_send_messages_total{door="kafka",result="SUCCESS",topic="lagged"} 30`,
		`keel_send_latency_seconds_count{door="kafka",outcome="ok"} 3`,
		`keel_connections{door="kafka"} `, `keel_door_requests_total{door="kafka"} `}
	var body string
	waitFor(t, "the Kafka lag and produces in /metrics", 30*time.Second, func() bool {
		resp, err := http.Get("http://" + httpAddr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		for _, w := range wants {
			if !strings.Contains(body, w) {
				return false
			}
		}
		return true
	})
	if strings.Contains(body, `keel_connections{door="kafka"} 0`) {
		t.Errorf("no Kafka connection counted while the client is connected")
	}
}

// TestServeKafkaSASLOverTLS: with aclEnable=true and tlsMode=enforcing the
// Kafka listener speaks TLS only and wants SASL as a plain_acl.yml
// account: franz-go with TLS and SCRAM-SHA-512 produces and reads back;
// without TLS, or with a wrong password, it gets nothing.
func TestServeKafkaSASLOverTLS(t *testing.T) {
	tmp := t.TempDir()
	cert, key := testCert(t, tmp)
	aclFile := filepath.Join(tmp, "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(securityACL), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\naclEnable=true\naclFile="+aclFile+
		"\ntlsMode=enforcing\ntlsServerCertPath="+cert+"\ntlsServerKeyPath="+key+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-c", conf, "--data-dir", filepath.Join(tmp, "data"), "--namesrv-listen", "127.0.0.1:0",
			"--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", ""}, &bytes.Buffer{}, logs)
	}()
	defer func() {
		cancel()
		<-done
	}()
	var addr string
	waitFor(t, "the Kafka listener", 30*time.Second, func() bool {
		if m := kafkaListenRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	if !strings.Contains(logs.String(), `tls=enforcing`) || !strings.Contains(logs.String(), "SASL PLAIN/SCRAM") {
		t.Errorf("the Kafka listener's log line does not say TLS and SASL:\n%s", logs.String())
	}
	tc := &tls.Config{InsecureSkipVerify: true}
	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.AllowAutoTopicCreation(), kgo.RequestRetries(1)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	good := client(kgo.DialTLSConfig(tc), kgo.SASL(scram.Auth{User: "admin001", Pass: "admin-secret"}.AsSha512Mechanism()),
		kgo.ConsumeTopics("secured"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err := good.ProduceSync(pctx, &kgo.Record{Topic: "secured", Value: []byte("over TLS")}).FirstErr(); err != nil {
		t.Fatalf("produce over TLS with SCRAM: %v", err)
	}
	for got := 0; got == 0; {
		fs := good.PollFetches(pctx)
		if pctx.Err() != nil {
			t.Fatal("nothing consumed over TLS")
		}
		got = len(fs.Records())
	}
	for name, opts := range map[string][]kgo.Opt{
		"plain TCP":      {kgo.SASL(scram.Auth{User: "admin001", Pass: "admin-secret"}.AsSha512Mechanism())},
		"wrong password": {kgo.DialTLSConfig(tc), kgo.SASL(scram.Auth{User: "admin001", Pass: "not-the-secret"}.AsSha512Mechanism())},
	} {
		short, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err := client(opts...).Ping(short)
		cancel()
		if err == nil {
			t.Errorf("%s: the Kafka listener answered", name)
		}
	}
}

// TestKafkaExamples builds examples/kafka and runs them against `keel
// serve`: the producer's acks=all callbacks report offsets, the consumer
// group reads them and commits, and its next run resumes after the commit.
func TestKafkaExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the example programs")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the examples")
	}
	bin := t.TempDir()
	build := exec.Command(goBin, "build", "-o", bin+string(filepath.Separator), "./examples/kafka/producer", "./examples/kafka/consumer")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build examples/kafka: %v\n%s", err, out)
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", tempDir, "--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "",
			"--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", ""}, &bytes.Buffer{}, logs)
	}()
	defer func() {
		cancel()
		<-done
	}()
	var addr string
	waitFor(t, "the Kafka listener", 30*time.Second, func() bool {
		if m := kafkaListenRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	example := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, filepath.Join(bin, name), append([]string{"-b", addr}, args...)...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "done:") {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	if out := example("producer", "-count", "6"); strings.Count(out, "offset=") != 6 {
		t.Fatalf("producer: want 6 acknowledged offsets:\n%s", out)
	}
	if out := example("consumer", "-count", "6", "-timeout", "40s"); strings.Count(out, "received ") != 6 {
		t.Fatalf("consumer: want 6 records:\n%s", out)
	}
	example("producer", "-count", "3")
	out := example("consumer", "-count", "3", "-timeout", "40s")
	if strings.Contains(out, "offset=0:") || strings.Count(out, "received ") != 3 {
		t.Fatalf("the group's second run did not resume after its commit:\n%s", out)
	}
}
