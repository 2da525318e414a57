package translate

import (
	"bytes"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// benchBatch is a stored batch of n 1 KiB records with a key and two headers.
func benchBatch(b *testing.B, codec, n int) []byte {
	recs := make([]kmsg.Record, n)
	for i := range recs {
		recs[i] = kmsg.Record{OffsetDelta: int32(i), Key: []byte("order-12345"), Value: bytes.Repeat([]byte("x"), 1024),
			Headers: []kmsg.Header{{Key: "trace", Value: []byte("abc")}, {Key: "CONTENT_TYPE", Value: []byte("text/plain")}}}
	}
	return stored(b, record.KafkaBatch, int32(n), "t", 0, 0, 0, 1, kafkaBatch(b, codec, 0, 1, recs))
}

// BenchmarkKafkaToRocketMQ: a RocketMQ pull converting a 100-record batch.
func BenchmarkKafkaToRocketMQ(b *testing.B) {
	for _, c := range []int{codecNone, codecLZ4, codecZstd} {
		b.Run(codecName(c), func(b *testing.B) {
			rec := benchBatch(b, c, 100)
			var dst []byte
			b.SetBytes(100 * 1024)
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, _, err = AppendRocketMQ(dst[:0], rec, "t", 0, Broker{Host: storeHost}, DefaultLimit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRocketMQToKafka: a Kafka fetch converting 100 RocketMQ messages
// of 1 KiB into one batch.
func BenchmarkRocketMQToKafka(b *testing.B) {
	m := &message.Message{Topic: "t", BornTimestamp: 1, Body: bytes.Repeat([]byte("x"), 1024),
		Properties: message.EncodeProperties(map[string]string{"KEYS": "order-12345", "TAGS": "A", "UNIQ_KEY": "0123456789ABCDEF0123456789ABCDEF"})}
	rec := rocketMQRecord(b, m)
	recs := make([]KafkaRecord, 100)
	var dst []byte
	b.SetBytes(100 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		for i := range recs {
			r, err := KafkaRecordOf(rec, int64(i), DefaultLimit)
			if err != nil {
				b.Fatal(err)
			}
			recs[i] = r
		}
		dst = AppendKafkaBatch(dst[:0], recs)
	}
}

// BenchmarkRocketMQToAMQP: an AMQP delivery of a RocketMQ message.
func BenchmarkRocketMQToAMQP(b *testing.B) {
	m := &message.Message{Topic: "t", BornTimestamp: 1, Body: bytes.Repeat([]byte("x"), 1024),
		Properties: message.EncodeProperties(map[string]string{"KEYS": "order-12345", "TAGS": "A"})}
	rec := rocketMQRecord(b, m)
	b.SetBytes(1024)
	b.ReportAllocs()
	for b.Loop() {
		if err := EachAMQP(rec, "t", DefaultLimit, func(*AMQPMessage) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkIndexKeys: the dispatcher's key indexing of a stored
// 100-record batch (each record keyed), per codec: what it costs per byte
// produced.
func BenchmarkIndexKeys(b *testing.B) {
	for _, c := range []int{codecNone, codecLZ4, codecZstd} {
		b.Run(codecName(c), func(b *testing.B) {
			rec := benchBatch(b, c, 100)
			b.SetBytes(100 * 1024)
			b.ReportAllocs()
			for b.Loop() {
				if err := IndexKeys(rec, DefaultLimit, func([]byte) {}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIndexKeysAMQP: the dispatcher's key indexing of a stored AMQP
// message, with a message-id and without either id (the common publish).
func BenchmarkIndexKeysAMQP(b *testing.B) {
	for _, c := range []struct {
		name string
		p    AMQPProperties
	}{
		{"message-id", AMQPProperties{Has: flagDeliveryMode | flagMessageID, DeliveryMode: 2, MessageID: "order-1"}},
		{"no-ids", AMQPProperties{Has: flagDeliveryMode, DeliveryMode: 2}},
	} {
		b.Run(c.name, func(b *testing.B) {
			rec := stored(b, record.AMQP, 1, "q", 0, 5, 8192, 1, amqpRecord("", "orders-eu-1", AppendAMQPProperties(nil, &c.p), make([]byte, 1024)))
			b.ReportAllocs()
			for b.Loop() {
				if err := IndexKeys(rec, DefaultLimit, func([]byte) {}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
