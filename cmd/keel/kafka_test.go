package main

import (
	"context"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var kafkaListenRE = regexp.MustCompile(`msg="Kafka listening" .*?addr=(\S+)`)

// TestServeKafka: `keel serve --kafka-listen` serves a Kafka producer
// (acks=all, zstd) and a consumer through the same store as the RocketMQ
// door, and the Kafka-created topic is one of the broker's topics.
func TestServeKafka(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var stdout, logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--data-dir", t.TempDir(), "--namesrv-listen", "127.0.0.1:0",
			"--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", ""}, &stdout, &logs)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not shut down:\n%s", logs.String())
		}
	}()
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
	code := run(context.Background(), []string{"serve", "--data-dir", t.TempDir(), "--namesrv-listen", "127.0.0.1:0",
		"--broker-listen", "127.0.0.1:0", "--http-listen", "", "--kafka-listen", busy.Addr().String()}, &syncBuffer{}, &logs)
	want := "Kafka listener cannot listen on " + busy.Addr().String() + ": address already in use (choose another address with --kafka-listen or kafkaListen in broker.conf)"
	if code == 0 || !strings.Contains(logs.String(), want) {
		t.Fatalf("exit %d, logs:\n%s\nwant %q", code, logs.String(), want)
	}
}

// TestKafkaAdvertised: what Metadata tells clients to dial.
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
