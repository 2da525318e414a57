package kafka

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "keel-test"
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	return cfg
}

// TestSaramaIdempotentSyncProducer: sarama's SyncProducer with
// WaitForAll and idempotence stores every message once, at dense offsets,
// and a consumer reads them back.
func TestSaramaIdempotentSyncProducer(t *testing.T) {
	n := startNode(t, nil)
	cfg := saramaConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Idempotent = true
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	cfg.Producer.Compression = sarama.CompressionZSTD
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer([]string{n.addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const total = 50
	for i := range total {
		part, off, err := p.SendMessage(&sarama.ProducerMessage{Topic: "sarama.sync", Partition: 1,
			Key: sarama.StringEncoder(fmt.Sprint(i)), Value: sarama.StringEncoder(fmt.Sprintf("v-%d", i))})
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if part != 1 || off != int64(i) {
			t.Fatalf("send %d: partition %d offset %d", i, part, off)
		}
	}
	// A batch of messages at once goes as one idempotent batch.
	var batch []*sarama.ProducerMessage
	for i := range 10 {
		batch = append(batch, &sarama.ProducerMessage{Topic: "sarama.sync", Partition: 1, Value: sarama.StringEncoder(fmt.Sprintf("b-%d", i))})
	}
	if err := p.SendMessages(batch); err != nil {
		t.Fatalf("send batch: %v", err)
	}
	c, err := sarama.NewConsumer([]string{n.addr}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition("sarama.sync", 1, sarama.OffsetOldest)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	timeout := time.After(30 * time.Second)
	for i := range total + 10 {
		select {
		case m := <-pc.Messages():
			want := fmt.Sprintf("v-%d", i)
			if i >= total {
				want = fmt.Sprintf("b-%d", i-total)
			}
			if m.Offset != int64(i) || string(m.Value) != want {
				t.Fatalf("message %d: offset %d value %q, want %q", i, m.Offset, m.Value, want)
			}
		case err := <-pc.Errors():
			t.Fatalf("consume: %v", err)
		case <-timeout:
			t.Fatalf("consumed %d of %d", i, total+10)
		}
	}
	if hwm := pc.HighWaterMarkOffset(); hwm != total+10 {
		t.Fatalf("high watermark %d, want %d", hwm, total+10)
	}
}

// saramaMember is a consumer-group handler recording what it consumed and
// marking it, so the next owner of a partition resumes after it.
type saramaMember struct {
	mu     sync.Mutex
	got    map[string]bool
	claims int
	setup  chan struct{}
}

func (h *saramaMember) Setup(s sarama.ConsumerGroupSession) error {
	h.mu.Lock()
	h.claims = 0
	for _, ps := range s.Claims() {
		h.claims += len(ps)
	}
	h.mu.Unlock()
	select {
	case h.setup <- struct{}{}:
	default:
	}
	return nil
}
func (h *saramaMember) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaMember) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		h.mu.Lock()
		h.got[string(m.Value)] = true
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

func (h *saramaMember) claimed() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.claims
}

func runSaramaMember(t *testing.T, addr, group, topic string) (*saramaMember, func()) {
	cfg := saramaConfig()
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	cfg.Consumer.Group.Heartbeat.Interval = 200 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 5 * time.Second
	cg, err := sarama.NewConsumerGroup([]string{addr}, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := &saramaMember{got: map[string]bool{}, setup: make(chan struct{}, 16)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
				t.Logf("consume: %v", err)
				time.Sleep(50 * time.Millisecond)
			}
		}
	}()
	return h, func() {
		cancel()
		<-done
		cg.Close()
	}
}

// TestSaramaConsumerGroupRebalance: two sarama ConsumerGroup members share
// a topic's partitions; when one leaves, the other takes all of them over
// and resumes where the first committed: every message is consumed.
func TestSaramaConsumerGroupRebalance(t *testing.T) {
	n := startNode(t, nil)
	cfg := saramaConfig()
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	p, err := sarama.NewSyncProducer([]string{n.addr}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	send := func(from, to int) {
		for i := from; i < to; i++ {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "sarama-group", Value: sarama.StringEncoder(fmt.Sprint(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(0, 40)
	a, stopA := runSaramaMember(t, n.addr, "sg", "sarama-group")
	b, stopB := runSaramaMember(t, n.addr, "sg", "sarama-group")
	defer stopB()
	deadline := time.Now().Add(30 * time.Second)
	for a.claimed()+b.claimed() != 2 || a.claimed() == 0 || b.claimed() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("claims %d and %d, want one partition each", a.claimed(), b.claimed())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopA()
	for b.claimed() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("after a member left, the other claims %d partitions", b.claimed())
		}
		time.Sleep(20 * time.Millisecond)
	}
	send(40, 60)
	for {
		a.mu.Lock()
		b.mu.Lock()
		missing := 0
		for i := range 60 {
			if !a.got[fmt.Sprint(i)] && !b.got[fmt.Sprint(i)] {
				missing++
			}
		}
		b.mu.Unlock()
		a.mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of 60 messages never consumed", missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSaramaClusterAdminConfigs: sarama's ClusterAdmin creates a topic
// with configs, reads them back with their sources (the topic's, the
// broker's, Kafka's defaults), changes them with AlterConfigs and
// IncrementalAlterConfigs, and gets INVALID_CONFIG naming the key for
// cleanup.policy=compact.
func TestSaramaClusterAdminConfigs(t *testing.T) {
	n := startNode(t, nil)
	adm, err := sarama.NewClusterAdmin([]string{n.addr}, saramaConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	str := func(s string) *string { return &s }
	err = adm.CreateTopic("sarama.cfg", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"retention.ms": str("3600000"), "message.timestamp.type": str("LogAppendTime")}}, false)
	if err != nil {
		t.Fatal(err)
	}
	describe := func() map[string]sarama.ConfigEntry {
		es, err := adm.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: "sarama.cfg"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]sarama.ConfigEntry{}
		for _, e := range es {
			out[e.Name] = e
		}
		return out
	}
	got := describe()
	for name, want := range map[string]struct {
		v   string
		src sarama.ConfigSource
	}{
		"retention.ms": {"3600000", sarama.SourceTopic}, "message.timestamp.type": {"LogAppendTime", sarama.SourceTopic},
		"max.message.bytes": {"4194304", sarama.SourceStaticBroker}, "retention.bytes": {"-1", sarama.SourceDefault},
	} {
		if e := got[name]; e.Value != want.v || e.Source != want.src {
			t.Errorf("%s: %+v, want %s from %v", name, e, want.v, want.src)
		}
	}
	if err := adm.IncrementalAlterConfig(sarama.TopicResource, "sarama.cfg", map[string]sarama.IncrementalAlterConfigsEntry{
		"retention.ms":    {Operation: sarama.IncrementalAlterConfigsOperationDelete},
		"retention.bytes": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: str("1000000")},
	}, false); err != nil {
		t.Fatal(err)
	}
	got = describe()
	if got["retention.ms"].Source != sarama.SourceStaticBroker || got["retention.bytes"].Value != "1000000" || got["message.timestamp.type"].Value != "LogAppendTime" {
		t.Errorf("after IncrementalAlterConfigs: %+v %+v %+v", got["retention.ms"], got["retention.bytes"], got["message.timestamp.type"])
	}
	if err := adm.AlterConfig(sarama.TopicResource, "sarama.cfg", map[string]*string{"segment.bytes": str("1048576")}, false); err != nil {
		t.Fatal(err)
	}
	got = describe()
	if got["segment.bytes"].Value != "1048576" || got["retention.bytes"].Source != sarama.SourceDefault {
		t.Errorf("after AlterConfigs (replacing the set): %+v %+v", got["segment.bytes"], got["retention.bytes"])
	}
	err = adm.CreateTopic("sarama.compact", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"cleanup.policy": str("compact")}}, false)
	var te *sarama.TopicError
	if !errors.As(err, &te) || te.Err != sarama.ErrInvalidConfig || te.ErrMsg == nil || !strings.Contains(*te.ErrMsg, "cleanup.policy") {
		t.Fatalf("compacted topic: %v, want INVALID_CONFIG naming cleanup.policy", err)
	}
}
