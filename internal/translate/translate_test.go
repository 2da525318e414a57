package translate

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var codecs = []int{codecNone, codecGzip, codecSnappy, codecLZ4, codecZstd}

func sampleRecords(n int) []kmsg.Record {
	recs := make([]kmsg.Record, n)
	for i := range recs {
		recs[i] = kmsg.Record{TimestampDelta64: int64(i * 10), OffsetDelta: int32(i),
			Key: []byte("key-" + strconv.Itoa(i)), Value: bytes.Repeat([]byte{byte('a' + i%26)}, 100+i),
			Headers: []kmsg.Header{{Key: "h", Value: []byte("v" + strconv.Itoa(i))}, {Key: "CONTENT_TYPE", Value: []byte("text/plain")}}}
	}
	recs[n-1].Key = nil // a null key
	return recs
}

// TestEachKafkaRecordCodecs: a batch a client encodes (kmsg) with every
// codec decodes to its records: offsets, timestamps, keys, values,
// headers.
func TestEachKafkaRecordCodecs(t *testing.T) {
	want := sampleRecords(20)
	for _, c := range codecs {
		t.Run(codecName(c), func(t *testing.T) {
			b := kafkaBatch(t, c, 1000, 1_700_000_000_000, want)
			i := 0
			err := EachKafkaRecord(b, 1<<20, func(r *KafkaRecord) error {
				w := want[i]
				if r.Offset != 1000+int64(i) || r.Timestamp != 1_700_000_000_000+w.TimestampDelta64 ||
					!bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) || !bytes.Equal(r.Value, w.Value) ||
					len(r.Headers) != 2 || r.Headers[0].Key != "h" || string(r.Headers[0].Value) != string(w.Headers[0].Value) {
					t.Errorf("record %d: %+v", i, r)
				}
				i++
				return nil
			})
			if err != nil || i != len(want) {
				t.Fatalf("%d records, %v", i, err)
			}
		})
	}
}

func TestEachKafkaRecordXerialSnappy(t *testing.T) {
	want := sampleRecords(50)
	plain := kafkaBatch(t, codecNone, 0, 5, want)
	b := append([]byte(nil), plain[:61]...)
	b = append(b, xerialSnappy(plain[61:], 300)...)
	b[22] = codecSnappy
	fixBatch(b)
	n := 0
	if err := EachKafkaRecord(b, 1<<20, func(r *KafkaRecord) error {
		if !bytes.Equal(r.Value, want[n].Value) {
			t.Errorf("record %d value", n)
		}
		n++
		return nil
	}); err != nil || n != 50 {
		t.Fatalf("%d records: %v", n, err)
	}
}

// fixBatch sets batchLength and the CRC after a test changed the batch.
func fixBatch(b []byte) {
	putU32(b[8:], uint32(len(b)-12))
	putU32(b[17:], crc32c(b[21:]))
}

// TestInflateBounded: a batch that inflates far beyond the limit is
// refused with ErrTooLarge for every codec, and refusing it does not take
// the memory the batch asks for.
func TestInflateBounded(t *testing.T) {
	big := kafkaBatch(t, codecNone, 0, 0, []kmsg.Record{{Value: make([]byte, 64<<20)}})
	for _, c := range codecs[1:] {
		t.Run(codecName(c), func(t *testing.T) {
			b := append([]byte(nil), big[:61]...)
			b = append(b, compress(t, c, big[61:])...)
			b[22] = byte(c)
			fixBatch(b)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := EachKafkaRecord(b, 1<<20, func(*KafkaRecord) error { return nil })
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("a 64 MiB batch under a 1 MiB limit: %v", err)
			}
			// The decoders' own buffers (an lz4 block, a zstd window of at
			// most 8 MiB) and the limit: far below what the batch asks.
			if got := after.TotalAlloc - before.TotalAlloc; got > 24<<20 {
				t.Errorf("refusing it allocated %d bytes", got)
			}
		})
	}
}

// TestAppendKafkaBatchReadByKmsg: the batch this package writes is one a
// client reads: kmsg parses it, its CRC-32C is right, its records are the
// ones given.
func TestAppendKafkaBatchReadByKmsg(t *testing.T) {
	recs := []KafkaRecord{
		{Offset: 7, Timestamp: 1000, Key: []byte("k"), Value: []byte("v1"), Headers: []Header{{"a", []byte("1")}, {"n", nil}}},
		{Offset: 8, Timestamp: 990, Value: []byte{}},
		{Offset: 9, Timestamp: 2000, Key: []byte{}, Value: []byte("v3")},
	}
	b := AppendKafkaBatch([]byte("prefix"), recs)[6:]
	var kb kmsg.RecordBatch
	if err := kb.ReadFrom(b); err != nil {
		t.Fatal(err)
	}
	if kb.FirstOffset != 7 || kb.LastOffsetDelta != 2 || kb.NumRecords != 3 || kb.FirstTimestamp != 1000 || kb.MaxTimestamp != 2000 ||
		kb.Magic != 2 || kb.Attributes != 0 || kb.ProducerID != -1 || int(kb.Length) != len(b)-12 {
		t.Fatalf("header %+v", kb)
	}
	if uint32(kb.CRC) != crc32c(b[21:]) {
		t.Fatal("CRC")
	}
	rest := kb.Records
	for i, w := range recs {
		var r kmsg.Record
		if err := r.ReadFrom(rest); err != nil {
			t.Fatal(err)
		}
		n := len(r.AppendTo(nil))
		rest = rest[n:]
		if kb.FirstOffset+int64(r.OffsetDelta) != w.Offset || kb.FirstTimestamp+r.TimestampDelta64 != w.Timestamp ||
			!bytes.Equal(r.Key, w.Key) || (r.Key == nil) != (w.Key == nil) || !bytes.Equal(r.Value, w.Value) || len(r.Headers) != len(w.Headers) {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	if len(rest) != 0 {
		t.Errorf("%d bytes after the records", len(rest))
	}
	// And this package reads it back.
	i := 0
	if err := EachKafkaRecord(b, 1<<20, func(r *KafkaRecord) error {
		if r.Offset != recs[i].Offset || r.Timestamp != recs[i].Timestamp || (r.Key == nil) != (recs[i].Key == nil) {
			t.Errorf("read back %d: %+v", i, r)
		}
		i++
		return nil
	}); err != nil || i != 3 {
		t.Fatal(i, err)
	}
}

var storeHost = netip.MustParseAddrPort("10.1.2.3:10911")

// TestKafkaToRocketMQ: every record of a stored batch becomes a RocketMQ
// message as the pull carries it: topic and queue of the entry, its queue
// offset, key in KEYS, headers as properties, the record's timestamp as
// born time, the store time, a deterministic UNIQ_KEY, the Kafka offset.
func TestKafkaToRocketMQ(t *testing.T) {
	for _, c := range codecs {
		t.Run(codecName(c), func(t *testing.T) {
			want := sampleRecords(5)
			rec := stored(t, record.KafkaBatch, 5, "orders", 3, 42, 4096, 1_700_000_001_000, kafkaBatch(t, c, 100, 1_700_000_000_000, want))
			out, n, err := AppendRocketMQ(nil, rec, "orders", 3, Broker{Host: storeHost}, DefaultLimit)
			if err != nil || n != 5 {
				t.Fatalf("%d messages, %v", n, err)
			}
			msgs := splitRecords(t, out)
			ids := map[string]bool{}
			for i, m := range msgs {
				p := message.ParseProperties(m.Properties)
				if m.Topic != "orders" || m.QueueID != 3 || m.QueueOffset != 42 || m.PhysOffset != 4096 ||
					m.StoreTimestamp != 1_700_000_001_000 || m.BornTimestamp != 1_700_000_000_000+int64(i*10) ||
					m.StoreHost != storeHost || !bytes.Equal(m.Body, want[i].Value) {
					t.Errorf("message %d: %+v", i, m)
				}
				if p[PropKafkaOffset] != strconv.Itoa(100+i) || p["h"] != "v"+strconv.Itoa(i) || p["CONTENT_TYPE"] != "text/plain" {
					t.Errorf("message %d properties %q", i, p)
				}
				if k, ok := p[message.PropKeys]; (want[i].Key != nil) != ok || k != string(want[i].Key) {
					t.Errorf("message %d KEYS %q", i, k)
				}
				id := p[message.PropUniqKey]
				if len(id) != 32 || ids[id] {
					t.Errorf("message %d UNIQ_KEY %q", i, id)
				}
				ids[id] = true
			}
			again, _, _ := AppendRocketMQ(nil, rec, "orders", 3, Broker{Host: storeHost}, DefaultLimit)
			if !bytes.Equal(again, out) {
				t.Error("the conversion is not deterministic")
			}
		})
	}
}

// TestKafkaToRocketMQUnmappable: a binary key goes to KAFKA_KEY_BASE64;
// headers that cannot be properties (separators, invalid UTF-8, a
// reserved name, a null value) are left out; the record still converts.
func TestKafkaToRocketMQUnmappable(t *testing.T) {
	recs := []kmsg.Record{{Key: []byte{0xff, 0x01}, Value: []byte("v"), Headers: []kmsg.Header{
		{Key: "ok", Value: []byte("yes")}, {Key: "bin", Value: []byte{0xff}}, {Key: "sep", Value: []byte("a\x02b")},
		{Key: "RETRY_TOPIC", Value: []byte("x")}, {Key: "UNIQ_KEY", Value: []byte("forged")}, {Key: "nil"}}}}
	rec := stored(t, record.KafkaBatch, 1, "t", 0, 0, 0, 1, kafkaBatch(t, codecNone, 0, 1, recs))
	out, _, err := AppendRocketMQ(nil, rec, "t", 0, Broker{Host: storeHost}, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	p := message.ParseProperties(splitRecords(t, out)[0].Properties)
	if p[PropKafkaKeyBase64] != "/wE=" || p["ok"] != "yes" || p[message.PropUniqKey] == "forged" {
		t.Errorf("properties %q", p)
	}
	for _, k := range []string{"bin", "sep", "RETRY_TOPIC", "nil", message.PropKeys} {
		if _, ok := p[k]; ok {
			t.Errorf("%s was carried: %q", k, p)
		}
	}
}

// TestRocketMQToKafka: KEYS is the key, the other properties (TAGS among
// them) headers, the born time the timestamp, a compressed body inflated.
func TestRocketMQToKafka(t *testing.T) {
	body := bytes.Repeat([]byte("compress me "), 100)
	m := &message.Message{Topic: "t", BornTimestamp: 1234, Body: body,
		Properties: message.EncodeProperties(map[string]string{"KEYS": "k1", "TAGS": "TagA", "color": "red"})}
	plain := rocketMQRecord(t, m)
	r, err := KafkaRecordOf(plain, 77, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if r.Offset != 77 || r.Timestamp != 1234 || string(r.Key) != "k1" || !bytes.Equal(r.Value, body) ||
		fmt.Sprint(r.Headers) != fmt.Sprint([]Header{{"TAGS", []byte("TagA")}, {"color", []byte("red")}}) {
		t.Errorf("%+v", r)
	}
	m.Body, m.SysFlag = zlibBytes(body), message.FlagCompressed
	r, err = KafkaRecordOf(rocketMQRecord(t, m), 77, DefaultLimit)
	if err != nil || !bytes.Equal(r.Value, body) {
		t.Fatalf("compressed body: %v", err)
	}
	if _, err := KafkaRecordOf(rocketMQRecord(t, m), 77, 100); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a body inflating past the limit: %v", err)
	}
}

// TestRoundTripKafkaRocketMQKafka (property): a Kafka record with a text
// key and distinct text headers read by RocketMQ and then given to Kafka
// again is the record it was (key, value, headers, timestamp), headers
// sorted by name, plus the properties the conversion adds.
func TestRoundTripKafkaRocketMQKafka(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := range 300 {
		n := 1 + rng.IntN(5)
		recs := make([]kmsg.Record, n)
		for i := range recs {
			recs[i] = kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: rng.Int64N(1000), Value: randBytes(rng, rng.IntN(200))}
			if rng.IntN(3) > 0 {
				recs[i].Key = []byte(randText(rng, 1+rng.IntN(20)))
			}
			for j := range rng.IntN(5) {
				recs[i].Headers = append(recs[i].Headers, kmsg.Header{Key: "h" + strconv.Itoa(j) + randText(rng, rng.IntN(5)), Value: []byte(randText(rng, rng.IntN(30)))})
			}
		}
		codec := codecs[iter%len(codecs)]
		rec := stored(t, record.KafkaBatch, int32(n), "t", 1, 9, 512, 99, kafkaBatch(t, codec, 50, 1_600_000_000_000, recs))
		out, got, err := AppendRocketMQ(nil, rec, "t", 1, Broker{Host: storeHost}, DefaultLimit)
		if err != nil || got != n {
			t.Fatalf("iter %d: %d of %d, %v", iter, got, n, err)
		}
		for i, m := range splitRecords(t, out) {
			b, _ := m.AppendStored(nil)
			k, err := KafkaRecordOf(b, 50+int64(i), DefaultLimit)
			if err != nil {
				t.Fatal(err)
			}
			w := recs[i]
			if k.Offset != 50+int64(i) || k.Timestamp != 1_600_000_000_000+w.TimestampDelta64 || string(k.Key) != string(w.Key) || !bytes.Equal(k.Value, w.Value) {
				t.Fatalf("iter %d record %d: %+v, want %+v", iter, i, k, w)
			}
			hs := map[string]string{}
			for _, h := range k.Headers {
				hs[h.Key] = string(h.Value)
			}
			for _, h := range w.Headers {
				if hs[h.Key] != string(h.Value) {
					t.Fatalf("iter %d record %d header %q: %q, want %q", iter, i, h.Key, hs[h.Key], h.Value)
				}
			}
			if hs[PropKafkaOffset] != strconv.Itoa(50+i) || len(hs) != len(w.Headers)+2 {
				t.Fatalf("iter %d record %d headers %q", iter, i, hs)
			}
		}
	}
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func randText(rng *rand.Rand, n int) string {
	const alpha = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_./:é"
	r := []rune(alpha)
	s := make([]rune, n)
	for i := range s {
		s[i] = r[rng.IntN(len(r))]
	}
	return string(s)
}

func amqpProps() *AMQPProperties {
	return &AMQPProperties{Has: flagContentType | flagContentEncoding | flagDeliveryMode | flagPriority | flagCorrelationID |
		flagReplyTo | flagExpiration | flagMessageID | flagTimestamp | flagType | flagUserID | flagAppID,
		ContentType: "application/json", ContentEncoding: "utf-8", DeliveryMode: 2, Priority: 5, CorrelationID: "corr-1",
		ReplyTo: "replies", Expiration: "60000", MessageID: "msg-1", Timestamp: 1_700_000_000, Type: "order", UserID: "guest", AppID: "shop",
		Headers: []Header{{"x-a", []byte("1")}, {"x-b", []byte("two")}}}
}

// TestAMQPToRocketMQAndBack: an AMQP message read by RocketMQ carries its
// properties under the documented names; given back to AMQP (as a
// RocketMQ message) it has the same properties and headers.
func TestAMQPToRocketMQAndBack(t *testing.T) {
	p := amqpProps()
	raw := AppendAMQPProperties(nil, p)
	rec := stored(t, record.AMQP, 1, "q", 0, 5, 8192, 1_700_000_000_500, amqpRecord("amq.direct", "rk", raw, []byte("hello")))
	out, n, err := AppendRocketMQ(nil, rec, "q", 0, Broker{Host: storeHost}, DefaultLimit)
	if err != nil || n != 1 {
		t.Fatal(n, err)
	}
	m := splitRecords(t, out)[0]
	props := message.ParseProperties(m.Properties)
	want := map[string]string{"KEYS": "msg-1", "CONTENT_TYPE": "application/json", "CONTENT_ENCODING": "utf-8", "CORRELATION_ID": "corr-1",
		"AMQP_REPLY_TO": "replies", "AMQP_EXPIRATION": "60000", "AMQP_TYPE": "order", "AMQP_USER_ID": "guest", "AMQP_APP_ID": "shop",
		"AMQP_DELIVERY_MODE": "2", "AMQP_PRIORITY": "5", "AMQP_EXCHANGE": "amq.direct", "AMQP_ROUTING_KEY": "rk", "x-a": "1", "x-b": "two"}
	for k, v := range want {
		if props[k] != v {
			t.Errorf("%s = %q, want %q", k, props[k], v)
		}
	}
	if m.BornTimestamp != 1_700_000_000_000 || m.QueueOffset != 5 || string(m.Body) != "hello" {
		t.Errorf("%+v", m)
	}
	b, _ := m.AppendStored(nil)
	var got []AMQPMessage
	if err := EachAMQP(b, "q", DefaultLimit, func(a *AMQPMessage) error {
		got = append(got, AMQPMessage{a.RoutingKey, append([]byte(nil), a.Props...), append([]byte(nil), a.Body...)})
		return nil
	}); err != nil || len(got) != 1 {
		t.Fatal(len(got), err)
	}
	back, err := ParseAMQPProperties(got[0].Props)
	if err != nil {
		t.Fatal(err)
	}
	hs := map[string]string{}
	for _, h := range back.Headers {
		hs[h.Key] = string(h.Value)
	}
	if back.Has&^flagHeaders != p.Has || back.ContentType != p.ContentType || back.ContentEncoding != p.ContentEncoding || back.DeliveryMode != 2 ||
		back.Priority != 5 || back.CorrelationID != p.CorrelationID || back.ReplyTo != p.ReplyTo || back.Expiration != p.Expiration ||
		back.MessageID != p.MessageID || back.Timestamp != p.Timestamp || back.Type != p.Type || back.UserID != p.UserID || back.AppID != p.AppID ||
		hs["x-a"] != "1" || hs["x-b"] != "two" || got[0].RoutingKey != "rk" || string(got[0].Body) != "hello" {
		t.Errorf("back: %+v headers %q routing key %q", back, hs, got[0].RoutingKey)
	}
}

// TestKafkaToAMQP: each record of a batch is one AMQP message: key as
// message-id, headers in the table, timestamp in seconds, persistent.
func TestKafkaToAMQP(t *testing.T) {
	recs := sampleRecords(3)
	rec := stored(t, record.KafkaBatch, 3, "t", 0, 0, 0, 1, kafkaBatch(t, codecZstd, 0, 1_700_000_000_000, recs))
	i := 0
	err := EachAMQP(rec, "t", DefaultLimit, func(a *AMQPMessage) error {
		p, err := ParseAMQPProperties(a.Props)
		if err != nil {
			return err
		}
		if string(a.Body) != string(recs[i].Value) || p.MessageID != string(recs[i].Key) || p.ContentType != "text/plain" ||
			p.DeliveryMode != 2 || p.Timestamp != 1_700_000_000 || a.RoutingKey != "t" || len(p.Headers) != 1 || p.Headers[0].Key != "h" {
			t.Errorf("message %d: %+v %+v", i, a, p)
		}
		i++
		return nil
	})
	if err != nil || i != 3 {
		t.Fatal(i, err)
	}
}

// TestParseAMQPHeaderTypes: every field-table type RabbitMQ clients send
// is read (numbers as decimal text; nested tables and arrays dropped).
func TestParseAMQPHeaderTypes(t *testing.T) {
	var tbl []byte
	add := func(k string, code byte, v ...byte) {
		tbl = append(tbl, byte(len(k)))
		tbl = append(tbl, k...)
		tbl = append(tbl, code)
		tbl = append(tbl, v...)
	}
	add("t", 't', 1)
	add("b", 'b', 0xff)
	add("B", 'B', 0xff)
	add("s", 's', 0xff, 0xfe)
	add("u", 'u', 0xff, 0xfe)
	add("I", 'I', 0xff, 0xff, 0xff, 0xfe)
	add("i", 'i', 0xff, 0xff, 0xff, 0xfe)
	add("l", 'l', 0, 0, 0, 0, 0, 0, 1, 0)
	add("T", 'T', 0, 0, 0, 0, 0x65, 0x53, 0xf1, 0)
	add("D", 'D', 2, 0, 0, 0x30, 0x39)
	add("S", 'S', 0, 0, 0, 2, 'h', 'i')
	add("x", 'x', 0, 0, 0, 1, 0xff)
	add("A", 'A', 0, 0, 0, 2, 'V', 'V')
	add("F", 'F', 0, 0, 0, 0)
	add("V", 'V')
	add("d", 'd', 0x3f, 0xf8, 0, 0, 0, 0, 0, 0)
	raw := []byte{0x20, 0, 0, 0, 0, 0}
	putU32(raw[2:], uint32(len(tbl)))
	raw = append(raw, tbl...)
	p, err := ParseAMQPProperties(raw)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, h := range p.Headers {
		got[h.Key] = string(h.Value)
	}
	want := map[string]string{"t": "true", "b": "-1", "B": "255", "s": "-2", "u": "65534", "I": "-2", "i": "4294967294",
		"l": "256", "T": "1700000000", "D": "123.45", "S": "hi", "x": "\xff", "d": "1.5"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// TestManyHeadersBounded: a record with tens of thousands of headers (a
// name repeated among them) converts quickly within RocketMQ's
// properties limit, the first header of a name deciding; properties
// repeated in a RocketMQ message give one header with the last value.
func TestManyHeadersBounded(t *testing.T) {
	hs := []kmsg.Header{{Key: "dup", Value: []byte("first")}}
	for i := range 50_000 {
		hs = append(hs, kmsg.Header{Key: "h" + strconv.Itoa(i), Value: []byte("v")}, kmsg.Header{Key: "dup", Value: []byte("later")})
	}
	rec := stored(t, record.KafkaBatch, 1, "t", 0, 0, 0, 1, kafkaBatch(t, codecNone, 0, 1, []kmsg.Record{{Value: []byte("x"), Headers: hs}}))
	out, _, err := AppendRocketMQ(nil, rec, "t", 0, Broker{Host: storeHost}, DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	m := splitRecords(t, out)[0]
	if len(m.Properties) > message.MaxPropertiesBytes || message.ParseProperties(m.Properties)["dup"] != "first" {
		t.Fatalf("%d bytes of properties, dup=%q", len(m.Properties), message.ParseProperties(m.Properties)["dup"])
	}
	props := "a\x011\x02dup\x01x\x02" + strings.Repeat("b\x012\x02", 20) + "dup\x01y\x02KEYS\x01k\x02"
	key, got := rocketMQHeaders([]byte(props))
	if string(key) != "k" || len(got) != 3 || got[1].Key != "dup" || string(got[1].Value) != "y" {
		t.Fatalf("key %q headers %q", key, got)
	}
}

// An AMQP record of several messages (an AMQP transaction's, read by the
// AMQP door only) is refused, not misread as one message.
func TestAMQPTransactionRecordNotConverted(t *testing.T) {
	rec := stored(t, record.AMQP, 2, "q", 0, 5, 8192, 1_700_000_000_500, amqpRecord("", "rk", nil, []byte("hello")))
	if _, _, err := AppendRocketMQ(nil, rec, "q", 0, Broker{Host: storeHost}, DefaultLimit); err == nil {
		t.Fatal("a transaction record was converted for RocketMQ")
	}
	if _, err := KafkaRecordOf(rec, 0, DefaultLimit); err == nil {
		t.Fatal("a transaction record was converted for Kafka")
	}
}
