package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// compactedCopyCleaned is the cleaned point of the compacted copy a
// broker keeps in dir (-1: none): bytes 16-23 of the copy's header
// (internal/kafka/compactfile.go).
func compactedCopyCleaned(dir string) int64 {
	names, err := filepath.Glob(filepath.Join(dir, "kafka-compacted", "*.kcc"))
	if err != nil || len(names) != 1 {
		return -1
	}
	b, err := os.ReadFile(names[0])
	if err != nil || len(b) < 64 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(b[16:]))
}

// readCompacted reads partition 0 of topic from the start through the
// door at addr up to its last offset (a live record), returning "offset
// key value" per record.
func readCompacted(ctx context.Context, t *testing.T, addr, topic string, last int64) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.FetchMaxWait(200*time.Millisecond),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []string
	for len(out) == 0 || !strings.HasPrefix(out[len(out)-1], fmt.Sprint(last)+" ") {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d records, not up to %d: %v", len(out), last, ctx.Err())
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := "NULL"
			if r.Value != nil {
				v = string(r.Value)
			}
			out = append(out, fmt.Sprintf("%d %s %s", r.Offset, r.Key, v))
		})
	}
	return out
}

// TestControllerFailoverKafkaCompacted: a compacted topic across an
// automatic failover, in real processes: the master's door cleans it and
// each slave cleans it on its own (its Kafka door is off); after the
// master is killed with SIGKILL, the new master's door serves its own
// copy: from the start, the latest record of every key (tombstones
// included) at the same offsets, with the same gaps, as the old master
// served before the kill.
func TestControllerFailoverKafkaCompacted(t *testing.T) {
	if testing.Short() {
		t.Skip("starts seven processes")
	}
	brokers, kafkaAddrs, group := doorFailoverCluster(t, "--kafka-listen")
	g := waitMasterElected(t, brokers, group)
	oldMasterID, firstEpoch := g.MasterID, g.MasterEpoch
	oldMaster := brokerOf(t, brokers, g, oldMasterID)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	const topic = "CompactK"
	cl, err := kgo.NewClient(kgo.SeedBrokers(kafkaAddrs[oldMaster]), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.ProducerLinger(0), kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if r, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact")}, topic); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	last := int64(-1)
	for v := range 5 {
		var rs []*kgo.Record
		for k := range 20 {
			r := &kgo.Record{Topic: topic, Key: fmt.Appendf(nil, "key%02d", k), Value: fmt.Appendf(nil, "v%d", v)}
			if v == 4 && k%5 == 0 {
				r.Value = nil
			}
			rs = append(rs, r)
		}
		if v == 4 {
			rs = append(rs, &kgo.Record{Topic: topic, Key: []byte("end"), Value: []byte("end")})
		}
		res := cl.ProduceSync(ctx, rs...)
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		last = res[len(res)-1].Record.Offset
	}
	// Every member cleans to the end: the master's door, the slaves'
	// cleaners (kafkaCompactionIntervalMs, 15 s by default).
	for i, b := range brokers {
		waitFor(t, fmt.Sprintf("broker %d's copy cleaned to %d", i, last+1), 90*time.Second, func() bool {
			return compactedCopyCleaned(b.dir) == last+1
		})
	}
	before := readCompacted(ctx, t, kafkaAddrs[oldMaster], topic, last)
	if len(before) != 21 {
		t.Fatalf("the master serves %d records, want the 21 latest: %v", len(before), before)
	}

	if err := brokers[oldMaster].proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-brokers[oldMaster].proc.exited
	waitFor(t, "a new master elected", 30*time.Second, func() bool {
		g = group()
		return g != nil && g.MasterID != 0 && g.MasterID != oldMasterID && g.MasterEpoch > firstEpoch
	})
	newMaster := brokerOf(t, brokers, g, g.MasterID)
	after := readCompacted(ctx, t, kafkaAddrs[newMaster], topic, last)
	if strings.Join(after, "|") != strings.Join(before, "|") {
		dumpBrokers(t, brokers)
		t.Fatalf("the new master serves\n%s\nthe old one served\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
}
