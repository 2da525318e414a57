package translate

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"hash/crc32"
	"net/netip"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// kafkaBatch builds a batch the way a Kafka client does, with kmsg's
// encoders (not this package's), compressed with codec.
func kafkaBatch(t testing.TB, codec int, base, firstTs int64, recs []kmsg.Record) []byte {
	t.Helper()
	var raw []byte
	for _, r := range recs {
		r.Length = 0
		n := len(r.AppendTo(nil)) - 1
		r.Length = int32(n)
		raw = r.AppendTo(raw)
	}
	data := compress(t, codec, raw)
	b := kmsg.RecordBatch{FirstOffset: base, Magic: 2, Attributes: int16(codec), LastOffsetDelta: int32(len(recs) - 1),
		FirstTimestamp: firstTs, MaxTimestamp: firstTs, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: int32(len(recs)), Records: data}
	out := b.AppendTo(nil)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out
}

func compress(t testing.TB, codec int, raw []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	switch codec {
	case codecNone:
		return raw
	case codecGzip:
		w := gzip.NewWriter(&buf)
		w.Write(raw)
		w.Close()
	case codecSnappy:
		return s2.EncodeSnappy(nil, raw)
	case codecLZ4:
		w := lz4.NewWriter(&buf)
		w.Write(raw)
		w.Close()
	case codecZstd:
		w, err := zstd.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(raw)
		w.Close()
	}
	return buf.Bytes()
}

// xerialSnappy frames raw in the Java client's snappy framing, chunked.
func xerialSnappy(raw []byte, chunk int) []byte {
	out := append([]byte(nil), xerialMagic...)
	out = binary.BigEndian.AppendUint32(out, 1)
	out = binary.BigEndian.AppendUint32(out, 1)
	for len(raw) > 0 {
		n := min(chunk, len(raw))
		blk := s2.EncodeSnappy(nil, raw[:n])
		out = binary.BigEndian.AppendUint32(out, uint32(len(blk)))
		out = append(out, blk...)
		raw = raw[n:]
	}
	return out
}

// stored wraps body in an envelope of type typ as the store keeps it.
func stored(t testing.TB, typ record.Type, messages int32, topic string, qid int32, qo, phys, storeMs int64, body []byte) []byte {
	t.Helper()
	rec, err := record.AppendEnvelope(nil, typ, messages, []record.Dest{{Topic: topic, QueueID: qid}}, body)
	if err != nil {
		t.Fatal(err)
	}
	e := record.Envelope(rec)
	e.Patch(phys, storeMs)
	e.EachDest(func(_ int, _ []byte, _ int32, _, _ int64, at int) error { e.PatchQueueOffset(at, qo); return nil })
	return rec
}

// amqpRecord builds an AMQP record body as internal/amqp stores it.
func amqpRecord(exchange, rk string, props, body []byte) []byte {
	b := append([]byte{byte(len(exchange))}, exchange...)
	b = append(b, byte(len(rk)))
	b = append(b, rk...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(props)))
	b = append(b, props...)
	return append(b, body...)
}

// rocketMQRecord is a stored RocketMQ message.
func rocketMQRecord(t testing.TB, m *message.Message) []byte {
	t.Helper()
	if !m.StoreHost.IsValid() {
		m.StoreHost = netip.MustParseAddrPort("127.0.0.1:10911")
	}
	b, err := m.AppendStored(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// splitRecords splits concatenated stored RocketMQ records.
func splitRecords(t testing.TB, b []byte) []*message.Message {
	t.Helper()
	var out []*message.Message
	for len(b) > 0 {
		if len(b) < 4 {
			t.Fatalf("%d stray bytes", len(b))
		}
		n := int(binary.BigEndian.Uint32(b))
		if n > len(b) || n < 4 {
			t.Fatalf("record of %d bytes, %d left", n, len(b))
		}
		m, err := message.Decode(b[:n])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		b = b[n:]
	}
	return out
}
