package translate

import (
	"bytes"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/store/record"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func indexKeys(t *testing.T, rec []byte) []string {
	t.Helper()
	var keys []string
	if err := IndexKeys(rec, DefaultLimit, func(k []byte) { keys = append(keys, string(k)) }); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestIndexKeysKafka: every text key of a batch, compressed or not, once
// (with its tokens when it holds spaces); no binary, empty or too long key.
func TestIndexKeysKafka(t *testing.T) {
	long := strings.Repeat("k", MaxIndexKeyBytes+1)
	recs := []kmsg.Record{{Key: []byte("order-1"), Value: []byte("a")}, {Key: []byte("order-2"), Value: []byte("b")},
		{Key: []byte("order-1"), Value: []byte("c")}, {Key: []byte{0xff, 0x01}, Value: []byte("d")}, {Value: []byte("e")},
		{Key: []byte(long), Value: []byte("f")}, {Key: []byte("user 42"), Value: []byte("g")}}
	for i := range recs {
		recs[i].OffsetDelta = int32(i)
	}
	want := []string{"order-1", "order-2", "user 42", "user", "42"}
	for _, codec := range []int{codecNone, codecGzip, codecSnappy, codecLZ4, codecZstd} {
		rec := stored(t, record.KafkaBatch, int32(len(recs)), "k", 0, 0, 4096, 1_700_000_000_000, kafkaBatch(t, codec, 0, 1_700_000_000_000, recs))
		if got := indexKeys(t, rec); !slices.Equal(got, want) {
			t.Errorf("codec %d: keys %q, want %q", codec, got, want)
		}
	}
}

// TestIndexKeysAMQP: an AMQP message's message-id and correlation-id;
// none without them.
func TestIndexKeysAMQP(t *testing.T) {
	rec := stored(t, record.AMQP, 1, "q", 0, 5, 8192, 1_700_000_000_500, amqpRecord("amq.direct", "rk", AppendAMQPProperties(nil, amqpProps()), []byte("hello")))
	if got := indexKeys(t, rec); !slices.Equal(got, []string{"msg-1", "corr-1"}) {
		t.Errorf("keys %q", got)
	}
	bare := stored(t, record.AMQP, 1, "q", 0, 5, 8192, 1_700_000_000_500, amqpRecord("", "q", AppendAMQPProperties(nil, &AMQPProperties{}), []byte("x")))
	if got := indexKeys(t, bare); len(got) != 0 {
		t.Errorf("keys of a message without ids: %q", got)
	}
	for _, c := range []struct {
		p    AMQPProperties
		want []string
	}{
		{AMQPProperties{Has: flagCorrelationID, CorrelationID: "corr-2"}, []string{"corr-2"}},
		{AMQPProperties{Has: flagMessageID | flagDeliveryMode, MessageID: "msg-2", DeliveryMode: 2}, []string{"msg-2"}},
		{AMQPProperties{Has: flagContentType | flagDeliveryMode | flagReplyTo, ContentType: "text/plain", DeliveryMode: 2, ReplyTo: "r"}, nil},
	} {
		rec := stored(t, record.AMQP, 1, "q", 0, 5, 8192, 1, amqpRecord("", "q", AppendAMQPProperties(nil, &c.p), []byte("x")))
		if got := indexKeys(t, rec); !slices.Equal(got, c.want) {
			t.Errorf("properties %+v: keys %q, want %q", c.p, got, c.want)
		}
	}
	if err := IndexKeys(stored(t, record.AMQP, 1, "q", 0, 5, 8192, 1, []byte{3, 'a'}), DefaultLimit, func([]byte) {}); err == nil {
		t.Error("a malformed AMQP record gave no error")
	}
	if err := IndexKeys(stored(t, record.AMQP, 1, "q", 0, 5, 8192, 1, amqpRecord("", "q", []byte{0x04}, []byte("x"))), DefaultLimit, func([]byte) {}); err == nil {
		t.Error("an AMQP record with one byte of property flags gave no error")
	}
}

// TestAppendRocketMQFound: a look-up by key gives only the records of a
// batch with the key (a token, the whole key), by id the one it names,
// without a key every record; a record not in the topic gives none.
func TestAppendRocketMQFound(t *testing.T) {
	recs := []kmsg.Record{{Key: []byte("a"), Value: []byte("1")}, {OffsetDelta: 1, Key: []byte("b c"), Value: []byte("2")},
		{OffsetDelta: 2, Key: []byte("a"), Value: []byte("3")}}
	rec := stored(t, record.KafkaBatch, 3, "k", 2, 10, 4096, 1_700_000_000_000, kafkaBatch(t, codecNone, 0, 1_700_000_000_000, recs))
	id := origin{PhysOffset: 4096, Index: 1, Kind: 'K'}.String()
	for _, c := range []struct{ topic, key, want string }{
		{"k", "a", "1 3"}, {"k", "c", "2"}, {"k", "b c", "2"}, {"k", id, "2"}, {"k", "", "1 2 3"}, {"", "", "1 2 3"}, {"other", "", ""}, {"k", "z", ""},
	} {
		out, n, err := AppendRocketMQFound([]byte("x"), rec, c.topic, c.key, Broker{Host: storeHost}, DefaultLimit)
		if err != nil || string(out[:1]) != "x" {
			t.Fatalf("%+v: %v", c, err)
		}
		var got []string
		for _, m := range splitRecords(t, out[1:]) {
			got = append(got, string(m.Body))
			if m.Topic != "k" || m.QueueID != 2 {
				t.Errorf("%+v: read as %s/%d", c, m.Topic, m.QueueID)
			}
		}
		if strings.Join(got, " ") != c.want || n != len(got) {
			t.Errorf("topic %q key %q: %q (n %d), want %q", c.topic, c.key, got, n, c.want)
		}
	}
}

// TestIndexKeysInflateBound: a compressed batch that inflates beyond
// IndexInflateRatio times its size (and MinIndexInflateBytes) is refused
// with ErrTooLarge, not inflated on the dispatcher.
func TestIndexKeysInflateBound(t *testing.T) {
	big := []kmsg.Record{{Key: []byte("bomb"), Value: bytes.Repeat([]byte{0}, 4*MinIndexInflateBytes)}}
	rec := stored(t, record.KafkaBatch, 1, "k", 0, 0, 4096, 1, kafkaBatch(t, codecZstd, 0, 1, big))
	if len(rec) > 4*MinIndexInflateBytes/IndexInflateRatio {
		t.Fatalf("the batch is not compressed enough to test the bound: %d bytes", len(rec))
	}
	var keys []string
	err := IndexKeys(rec, DefaultLimit, func(k []byte) { keys = append(keys, string(k)) })
	if !errors.Is(err, ErrTooLarge) || len(keys) != 0 {
		t.Errorf("keys %q, err %v", keys, err)
	}
	// The same records less compressible: within the bound.
	ok := []kmsg.Record{{Key: []byte("fine"), Value: bytes.Repeat([]byte{0}, MinIndexInflateBytes/2)}}
	rec = stored(t, record.KafkaBatch, 1, "k", 0, 0, 4096, 1, kafkaBatch(t, codecZstd, 0, 1, ok))
	if got := indexKeys(t, rec); !slices.Equal(got, []string{"fine"}) {
		t.Errorf("keys %q", got)
	}
}

// TestIndexKeysReusesItsBuffer: IndexKeys inflates compressed batches
// into a pooled buffer, so batch after batch allocates a small fraction of
// what they inflate to (it grew a new buffer for each: about twice the
// inflated size), and a batch read after another, larger or of another
// codec, still names exactly its own keys.
func TestIndexKeysReusesItsBuffer(t *testing.T) {
	batch := func(codec, n int, prefix string) ([]byte, []string) {
		recs := make([]kmsg.Record, n)
		var want []string
		for i := range recs {
			k := prefix + "-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
			recs[i] = kmsg.Record{OffsetDelta: int32(i), Key: []byte(k), Value: bytes.Repeat([]byte{byte('0' + i%10)}, 1024)}
			want = append(want, k)
		}
		return stored(t, record.KafkaBatch, int32(n), "k", 0, 0, 4096, 1_700_000_000_000, kafkaBatch(t, codec, 0, 1_700_000_000_000, recs)), want
	}
	for _, codec := range []int{codecSnappy, codecLZ4, codecZstd} {
		big, bigKeys := batch(codec, 100, "big")
		small, smallKeys := batch(codec, 3, "small")
		otherCodec := codecLZ4
		if codec == codecLZ4 {
			otherCodec = codecZstd
		}
		other, otherKeys := batch(otherCodec, 50, "other") // another codec between
		for range 3 {
			for _, c := range []struct {
				rec  []byte
				want []string
			}{{big, bigKeys}, {small, smallKeys}, {other, otherKeys}} {
				if got := indexKeys(t, c.rec); !slices.Equal(got, c.want) {
					t.Fatalf("codec %d: keys %q, want %q", codec, got, c.want)
				}
			}
		}
		if raceEnabled {
			continue
		}
		const runs = 50
		var before, after runtime.MemStats
		indexKeys(t, big) // the pool holds a buffer of the batch's size
		runtime.ReadMemStats(&before)
		for range runs {
			if err := IndexKeys(big, DefaultLimit, func([]byte) {}); err != nil {
				t.Fatal(err)
			}
		}
		runtime.ReadMemStats(&after)
		perCall := (after.TotalAlloc - before.TotalAlloc) / runs
		if inflated := uint64(100 * 1024); perCall > inflated/4 {
			t.Errorf("codec %d: %d bytes allocated per call for a batch inflating to more than %d", codec, perCall, inflated)
		}
	}
}
