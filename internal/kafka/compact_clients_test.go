package kafka

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// compactedForClients makes a compacted topic of 8 keys, 6 versions each
// in lz4 batches of 8, the last version of keys 0 and 4 tombstones, and a
// last live record, cleaned; it returns the node and the expected
// "offset key value" lines (NULL for a tombstone) in offset order.
func compactedForClients(t *testing.T) (*testNode, []string) {
	t.Helper()
	n := compactNode(t, nil, 10*time.Millisecond)
	_, adm := adminClient(t, n.addr)
	ctx := ctx30(t)
	if r, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("compact"),
		"min.cleanable.dirty.ratio": kmsg.StringPtr("0")}, "cmp.clients"); err != nil || r.Err != nil {
		t.Fatal(err, r.Err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(n.addr), kgo.ProducerBatchCompression(kgo.Lz4Compression()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	last := map[string]string{}
	at := map[string]int64{}
	for v := range 6 {
		var rs []*kgo.Record
		for k := range 8 {
			r := &kgo.Record{Topic: "cmp.clients", Key: fmt.Appendf(nil, "key%d", k), Value: fmt.Appendf(nil, "value%d-%d", k, v)}
			if v == 5 && k%4 == 0 {
				r.Value = nil
			}
			rs = append(rs, r)
		}
		res := cl.ProduceSync(ctx, rs...)
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		for _, pr := range res {
			v := "NULL"
			if pr.Record.Value != nil {
				v = string(pr.Record.Value)
			}
			last[string(pr.Record.Key)], at[string(pr.Record.Key)] = v, pr.Record.Offset
		}
	}
	res := cl.ProduceSync(ctx, &kgo.Record{Topic: "cmp.clients", Key: []byte("end"), Value: []byte("end")})
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	last["end"], at["end"] = "end", res[0].Record.Offset
	cleanedTo(t, n, "cmp.clients", 0)
	lines := make([]string, 0, len(last))
	for off := int64(0); off <= at["end"]; off++ {
		for k, o := range at {
			if o == off {
				lines = append(lines, fmt.Sprintf("%d %s %s", off, k, last[k]))
			}
		}
	}
	return n, lines
}

// TestKcatReadsCompactedTopic: librdkafka (kcat -C -o beginning -e) reads
// a cleaned compacted topic from the start: the latest record of every
// key, tombstones as NULL, at their original offsets across the gaps.
func TestKcatReadsCompactedTopic(t *testing.T) {
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Skip("kcat is not installed (apt-get install kcat): librdkafka compatibility not tested")
	}
	n, want := compactedForClients(t)
	out, _ := kcat(t, "", "-C", "-b", n.addr, "-t", "cmp.clients", "-p", "0", "-o", "beginning", "-e", "-Z", "-f", "%o %k %s\n")
	if got := strings.Split(strings.TrimSpace(out), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("kcat read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestSaramaReadsCompactedTopic: sarama's partition consumer reads a
// cleaned compacted topic from the oldest offset: the latest record of
// every key at its offset, tombstones with a nil value.
func TestSaramaReadsCompactedTopic(t *testing.T) {
	n, want := compactedForClients(t)
	c, err := sarama.NewConsumer([]string{n.addr}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition("cmp.clients", 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	timeout := time.After(30 * time.Second)
	var got []string
	for len(got) < len(want) {
		select {
		case m := <-pc.Messages():
			v := "NULL"
			if m.Value != nil {
				v = string(m.Value)
			}
			got = append(got, fmt.Sprintf("%d %s %s", m.Offset, m.Key, v))
		case err := <-pc.Errors():
			t.Fatal(err)
		case <-timeout:
			t.Fatalf("read %v, want %v", got, want)
		}
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("sarama read\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
