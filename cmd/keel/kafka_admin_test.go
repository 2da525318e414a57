package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaGroupsInTheCLI: a Kafka consumer group with a member online
// counts that member in keel group list and describe, and keel kafka
// describes it as kafka-consumer-groups.sh --describe does; keel kafka
// connections lists the client's connections.
func TestKafkaGroupsInTheCLI(t *testing.T) {
	r := startRun(t, "serve", "--data-dir", t.TempDir(), "--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "",
		"--broker-listen", "127.0.0.1:0", "--kafka-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0")
	ns := r.await(t, "the NameServer", listenRE)
	addr := r.await(t, "the Kafka listener", kafkaListenRE)
	p, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(p).CreateTopic(ctx, 2, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	for part := range int32(2) {
		for i := range 3 {
			if err := p.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: part, Value: []byte{byte(i)}}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"), kgo.ClientID("billing-1"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit(), kgo.FetchMaxWait(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var last *kgo.Record
	for seen := 0; seen < 6; {
		fs := c.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 6", seen)
		}
		fs.EachRecord(func(rec *kgo.Record) {
			seen++
			if rec.Partition == 0 && rec.Offset == 1 {
				last = rec
			}
		})
	}
	// Commit offset 2 on partition 0 (records 0 and 1 consumed), nothing on 1.
	if err := c.CommitRecords(ctx, last); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, context.Background(), append(args, "-n", ns)...)
		if code != exitOK {
			t.Fatalf("keel %v: exit %d: %s", args, code, errOut)
		}
		return out
	}
	if out := cli("group", "list"); !regexp.MustCompile(`(?m)^billing\s+1\s+CLUSTERING\s`).MatchString(out) {
		t.Errorf("keel group list does not count the Kafka member:\n%s", out)
	}
	if out := cli("group", "describe", "billing"); !regexp.MustCompile(`Members:\s+1\n`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^billing-1-\S+\s+127\.0\.0\.1\s+OTHER`).MatchString(out) {
		t.Errorf("keel group describe lacks the Kafka member:\n%s", out)
	}
	if out := cli("kafka", "groups"); !regexp.MustCompile(`(?m)^broker-a\s+billing\s+Stable\s+consumer\s+\S+\s+\d+\s+1$`).MatchString(out) {
		t.Errorf("keel kafka groups:\n%s", out)
	}
	out := cli("kafka", "describe", "billing")
	for _, re := range []string{
		`(?m)^GROUP\s+TOPIC\s+PARTITION\s+CURRENT-OFFSET\s+LOG-END-OFFSET\s+LAG\s+CONSUMER-ID\s+HOST\s+CLIENT-ID$`,
		`(?m)^billing\s+orders\s+0\s+2\s+3\s+1\s+billing-1-\S+\s+127\.0\.0\.1\s+billing-1$`,
		// Nothing committed on partition 1: the consume stats count from 0.
		`(?m)^billing\s+orders\s+1\s+0\s+3\s+3\s+billing-1-\S+\s+127\.0\.0\.1\s+billing-1$`,
		`State:\s+Stable`, `Members:\s+1`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("keel kafka describe lacks %s:\n%s", re, out)
		}
	}
	// /metrics counts the member and its group as online consumers.
	httpAddr := r.await(t, "the HTTP listener", httpListenRE)
	code, body := httpGet(t, "http://"+httpAddr+"/metrics")
	if code != 200 || !strings.Contains(body, "\nkeel_consumers 1\n") || !strings.Contains(body, "\nkeel_consumer_groups_online 1\n") {
		t.Errorf("/metrics does not count the Kafka member: %d\n%s", code, grepLines(body, "keel_consumer"))
	}
	if out := cli("kafka", "connections"); !strings.Contains(out, "billing-1") || !regexp.MustCompile(`(?m)^broker-a\s+127\.0\.0\.1:\d+\s`).MatchString(out) {
		t.Errorf("keel kafka connections:\n%s", out)
	}
}

// grepLines returns the lines of s that start with prefix.
func grepLines(s, prefix string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
