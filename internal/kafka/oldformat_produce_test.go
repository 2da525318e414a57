package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// TestSaramaOldMessageFormats: sarama speaking old protocol versions
// produces message sets of magic 0 (Produce v0, Kafka 0.8.2) and magic 1
// (Produce v2, Kafka 0.10) — plain and compressed with gzip, snappy and
// lz4 —, each stored as a batch and read back by franz-go with its key,
// value and (magic 1) timestamp at dense offsets.
func TestSaramaOldMessageFormats(t *testing.T) {
	n := startNode(t, nil)
	ts := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	cases := []struct {
		version sarama.KafkaVersion
		codec   sarama.CompressionCodec
	}{
		{sarama.V0_8_2_0, sarama.CompressionNone}, {sarama.V0_8_2_0, sarama.CompressionGZIP},
		{sarama.V0_10_0_0, sarama.CompressionNone}, {sarama.V0_10_0_0, sarama.CompressionGZIP},
		{sarama.V0_10_0_0, sarama.CompressionSnappy}, {sarama.V0_10_0_0, sarama.CompressionLZ4},
	}
	const per = 5
	for ci, c := range cases {
		cfg := saramaConfig()
		cfg.Version = c.version
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Return.Successes = true
		cfg.Producer.Partitioner = sarama.NewManualPartitioner
		cfg.Producer.Compression = c.codec
		cfg.Producer.Flush.Messages = per // one message set per case
		p, err := sarama.NewSyncProducer([]string{n.addr}, cfg)
		if err != nil {
			t.Fatalf("%v %v: %v", c.version, c.codec, err)
		}
		var msgs []*sarama.ProducerMessage
		for i := range per {
			msgs = append(msgs, &sarama.ProducerMessage{Topic: "oldfmt", Partition: 0, Timestamp: ts,
				Key: sarama.StringEncoder(fmt.Sprintf("k-%d-%d", ci, i)), Value: sarama.StringEncoder(fmt.Sprintf("v-%d-%d", ci, i))})
		}
		if err := p.SendMessages(msgs); err != nil {
			t.Fatalf("%v %v: send: %v", c.version, c.codec, err)
		}
		for i, m := range msgs {
			if m.Offset != int64(ci*per+i) {
				t.Fatalf("%v %v: message %d at offset %d, want %d", c.version, c.codec, i, m.Offset, ci*per+i)
			}
		}
		p.Close()
	}
	got := consumeN(t, n.addr, "oldfmt", 0, 0, len(cases)*per)
	for i, r := range got[:len(cases)*per] {
		ci, j := i/per, i%per
		if r.Offset != int64(i) || string(r.Key) != fmt.Sprintf("k-%d-%d", ci, j) || string(r.Value) != fmt.Sprintf("v-%d-%d", ci, j) {
			t.Fatalf("record %d: offset %d key %q value %q", i, r.Offset, r.Key, r.Value)
		}
		if cases[ci].version == sarama.V0_10_0_0 && !r.Timestamp.Equal(ts) {
			t.Errorf("record %d (magic 1): timestamp %v, want %v", i, r.Timestamp, ts)
		}
	}
}
