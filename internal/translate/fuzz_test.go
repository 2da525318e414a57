package translate

import (
	"testing"

	"github.com/keelmq/keel/internal/message"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fuzzLimit keeps what a hostile input may make the converters allocate
// small; they must refuse beyond it, never panic.
const fuzzLimit = 1 << 20

// FuzzEachKafkaRecord: any bytes as a stored batch body: no panic, no
// output beyond the limit; what decodes converts for RocketMQ and AMQP.
func FuzzEachKafkaRecord(f *testing.F) {
	for _, c := range codecs {
		f.Add(kafkaBatch(f, c, 3, 1000, sampleRecords(3)))
	}
	f.Add(make([]byte, 61))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) >= 21 {
			fixBatch(b) // let mutations past the CRC reach the record decoder
		}
		total := 0
		err := EachKafkaRecord(b, fuzzLimit, func(r *KafkaRecord) error {
			total += len(r.Key) + len(r.Value)
			return nil
		})
		if err == nil && total > fuzzLimit {
			t.Fatalf("%d bytes of records under a %d limit", total, fuzzLimit)
		}
		rec, err := record.AppendEnvelope(nil, record.KafkaBatch, 1, []record.Dest{{Topic: "t", QueueID: 0}}, b)
		if err != nil {
			return
		}
		out, _, err := AppendRocketMQ(nil, rec, "t", 0, Broker{Host: storeHost}, fuzzLimit)
		if err == nil && len(out) > fuzzLimit {
			t.Fatalf("%d bytes converted under a %d limit", len(out), fuzzLimit)
		}
		EachAMQP(rec, "t", fuzzLimit, func(*AMQPMessage) error { return nil })
	})
}

// FuzzParseAMQPProperties: any content properties decode without panic;
// what decodes re-encodes to properties that decode to the same fields.
func FuzzParseAMQPProperties(f *testing.F) {
	f.Add(AppendAMQPProperties(nil, amqpProps()))
	f.Add([]byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParseAMQPProperties(raw)
		if err != nil {
			return
		}
		q, err := ParseAMQPProperties(AppendAMQPProperties(nil, &p))
		if err != nil {
			t.Fatalf("re-encoded properties do not parse: %v", err)
		}
		if q.ContentType != p.ContentType || q.MessageID != p.MessageID || q.Timestamp != p.Timestamp || len(q.Headers) != len(p.Headers) {
			t.Fatalf("%+v\n%+v", p, q)
		}
	})
}

// FuzzAMQPRecord: any AMQP record body converts or fails cleanly.
func FuzzAMQPRecord(f *testing.F) {
	f.Add(amqpRecord("ex", "rk", AppendAMQPProperties(nil, amqpProps()), []byte("body")))
	f.Fuzz(func(t *testing.T, body []byte) {
		rec, err := record.AppendEnvelope(nil, record.AMQP, 1, []record.Dest{{Topic: "q", QueueID: 0}}, body)
		if err != nil {
			return
		}
		AppendRocketMQ(nil, rec, "q", 0, Broker{Host: storeHost}, fuzzLimit)
		KafkaRecordOf(rec, 0, fuzzLimit)
	})
}

// FuzzRocketMQRecord: any bytes as a RocketMQ record convert for Kafka
// and AMQP or fail cleanly; the Kafka batch made from one parses.
func FuzzRocketMQRecord(f *testing.F) {
	f.Add([]byte{0, 0, 0, 8, 0xDA, 0xA3, 0x20, 0xA7})
	f.Add(rocketMQRecord(f, &message.Message{Topic: "t", BornTimestamp: 1, Body: []byte("body"),
		Properties: message.EncodeProperties(map[string]string{"KEYS": "k", "TAGS": "a", "CONTENT_TYPE": "text/plain", "AMQP_PRIORITY": "3"})}))
	f.Add(rocketMQRecord(f, &message.Message{Topic: "t", SysFlag: message.FlagCompressed, Body: zlibBytes([]byte("zzzzzzzz")),
		Properties: "KEYS\x01a\x02KEYS\x01b\x02x\x01\x01y\x02"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := KafkaRecordOf(b, 5, fuzzLimit)
		if err == nil {
			batch := AppendKafkaBatch(nil, []KafkaRecord{r})
			var kb kmsg.RecordBatch
			if err := kb.ReadFrom(batch); err != nil {
				t.Fatal(err)
			}
			if err := EachKafkaRecord(batch, fuzzLimit+len(batch), func(*KafkaRecord) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		EachAMQP(b, "t", fuzzLimit, func(*AMQPMessage) error { return nil })
	})
}
