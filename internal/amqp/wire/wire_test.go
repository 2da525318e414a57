package wire

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTableRoundTripEveryTypeCode(t *testing.T) {
	in := Table{
		"t": true, "b": int8(-3), "B": uint8(200), "s": int16(-300), "u": uint16(60000),
		"I": int32(-70000), "i": uint32(4000000000), "l": int64(-1 << 40), "f": float32(1.5),
		"d": float64(2.25), "D": Decimal{Scale: 2, Value: 314}, "S": []byte("long"),
		"A": []any{int32(1), []byte("x"), nil}, "T": Timestamp(1700000000),
		"F": Table{"nested": true}, "V": nil, "x": Binary{0, 1, 2},
	}
	var w Writer
	w.Table(in)
	r := NewReader(w.Buf)
	out := r.Table()
	if err := r.Err(); err != nil || r.Len() != 0 {
		t.Fatalf("read: %v, %d left", err, r.Len())
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n in %#v\nout %#v", in, out)
	}
}

// RabbitMQ's codes, not the 0-9-1 text's: 's' is a signed 16-bit integer
// and 'l' a signed 64-bit one (errata section 3). These are the bytes
// amqp091-go writes for int16(-2) and int64(5).
func TestTableRabbitMQTypeCodes(t *testing.T) {
	b := []byte{0, 0, 0, 16,
		1, 'a', 's', 0xff, 0xfe,
		1, 'b', 'l', 0, 0, 0, 0, 0, 0, 0, 5}
	r := NewReader(b)
	got := r.Table()
	if r.Err() != nil || got["a"] != int16(-2) || got["b"] != int64(5) {
		t.Fatalf("got %#v, %v", got, r.Err())
	}
}

func TestEveryMethodRoundTrips(t *testing.T) {
	n := 0
	for cid := uint16(0); cid < 100; cid++ {
		for mid := uint16(0); mid < 130; mid++ {
			m := NewMethod(cid, mid)
			if m == nil {
				continue
			}
			n++
			fillFields(reflect.ValueOf(m).Elem())
			b := AppendMethod(nil, m)
			got, err := ReadMethod(b)
			if err != nil {
				t.Fatalf("%s: %v", m.Name(), err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Fatalf("%s:\n in %#v\nout %#v", m.Name(), m, got)
			}
			if c, i := got.ID(); c != cid || i != mid {
				t.Fatalf("%s: ids %d.%d", m.Name(), c, i)
			}
		}
	}
	if n != 64 {
		t.Fatalf("%d methods, the extended 0-9-1 definition has 64", n)
	}
}

// fillFields sets every field to a non-zero value so that the round trip
// covers bit packing (every bit true) and every primitive.
func fillFields(v reflect.Value) {
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.Bool:
			f.SetBool(i%2 == 0)
		case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.String:
			f.SetString("s" + string(rune('a'+i)))
		case reflect.Slice:
			f.SetBytes([]byte{byte(i)})
		case reflect.Map:
			f.Set(reflect.ValueOf(Table{"k": int32(i)}))
		}
	}
}

// queue.declare's five bits share one octet, low bit first: these are the
// bytes of queue.declare(queue="q", durable=true, auto-delete=true).
func TestBitsPackedLowBitFirst(t *testing.T) {
	b := []byte{0, 50, 0, 10, 0, 0, 1, 'q', 0x02 | 0x08, 0, 0, 0, 0}
	m, err := ReadMethod(b)
	if err != nil {
		t.Fatal(err)
	}
	q := m.(*QueueDeclare)
	if q.Queue != "q" || q.Passive || !q.Durable || q.Exclusive || !q.AutoDelete || q.NoWait {
		t.Fatalf("%+v", q)
	}
	if got := AppendMethod(nil, q); !bytes.Equal(got, b) {
		t.Fatalf("re-encoded % x, want % x", got, b)
	}
}

func TestPropertiesRoundTrip(t *testing.T) {
	p := BasicProperties{Flags: FlagContentType | FlagHeaders | FlagDeliveryMode | FlagExpiration | FlagTimestamp,
		ContentType: "text/plain", Headers: Table{"h": int32(1)}, DeliveryMode: 2, Expiration: "60000", Timestamp: 7}
	var w Writer
	p.Write(&w)
	payload := AppendHeader(nil, 5, w.Buf)
	h, err := ReadHeader(payload)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(h.Props, p) || h.BodySize != 5 || !bytes.Equal(h.Raw, w.Buf) {
		t.Fatalf("%+v", h)
	}
}

func TestFrameLimitsAndEnd(t *testing.T) {
	ok := AppendFrame(nil, FrameBody, 1, []byte("hello"))
	fr := NewFrameReader(bytes.NewReader(ok))
	f, err := fr.ReadFrame(FrameMinSize)
	if err != nil || string(f.Payload) != "hello" || f.Channel != 1 {
		t.Fatalf("%+v %v", f, err)
	}
	big := AppendFrame(nil, FrameBody, 1, make([]byte, FrameMinSize))
	if _, err := NewFrameReader(bytes.NewReader(big)).ReadFrame(FrameMinSize); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
	bad := append([]byte{}, ok...)
	bad[len(bad)-1] = 0
	if _, err := NewFrameReader(bytes.NewReader(bad)).ReadFrame(FrameMinSize); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad end byte: %v", err)
	}
	bad = append([]byte{}, ok...)
	bad[0] = 4
	if _, err := NewFrameReader(bytes.NewReader(bad)).ReadFrame(FrameMinSize); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bad type: %v", err)
	}
}

func TestMalformedMethods(t *testing.T) {
	for name, b := range map[string][]byte{
		"short ids":      {0, 10},
		"unknown method": {0, 99, 0, 1},
		"truncated":      {0, 50, 0, 10, 0, 0, 5, 'q'},
		"trailing":       {0, 20, 0, 10, 0, 7},
		"bad table code": {0, 50, 0, 10, 0, 0, 1, 'q', 0, 0, 0, 0, 4, 1, 'k', 'Z', 0},
		"table too long": {0, 50, 0, 10, 0, 0, 1, 'q', 0, 0xff, 0xff, 0xff, 0xff},
	} {
		if _, err := ReadMethod(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	deep := []byte{}
	for range MaxTableDepth + 2 {
		deep = append(deep, 'A', 0, 0, 0, 0)
	}
	r := NewReader(append([]byte{0, 0, 0, byte(len(deep) + 2), 1, 'k'}, deep...))
	r.Table()
	if !errors.Is(r.Err(), ErrMalformed) {
		t.Fatalf("deep nesting: %v", r.Err())
	}
}

// TestAppendDeliverFrame: basic.deliver laid out on its concrete type is
// the frame AppendMethodFrame lays out, and appending it allocates
// nothing once the buffer has room.
func TestAppendDeliverFrame(t *testing.T) {
	for _, m := range []*BasicDeliver{
		{ConsumerTag: "amq.ctag-1", DeliveryTag: 1, Exchange: "", RoutingKey: "q"},
		{ConsumerTag: "c", DeliveryTag: 1<<63 + 5, Redelivered: true, Exchange: "amq.topic", RoutingKey: strings.Repeat("k", 255)},
		{},
	} {
		for _, ch := range []uint16{0, 1, 0x1234, 0xffff} {
			want := AppendMethodFrame([]byte("held"), ch, m)
			if got := AppendDeliverFrame([]byte("held"), ch, m); !bytes.Equal(got, want) {
				t.Fatalf("%+v on channel %d:\n got % x\nwant % x", m, ch, got, want)
			}
		}
	}
	buf := make([]byte, 0, 1024)
	tag, rk := "amq.ctag-abc", "bench"
	allocs := testing.AllocsPerRun(1000, func() {
		buf = AppendDeliverFrame(buf[:0], 1, &BasicDeliver{ConsumerTag: tag, DeliveryTag: 7, RoutingKey: rk})
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per basic.deliver frame", allocs)
	}
}
