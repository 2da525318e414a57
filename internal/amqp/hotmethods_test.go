package amqp

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store/record"
)

// TestReadHotAsReadMethod: basic.publish and basic.ack payloads, well
// formed and cut or padded, decode through readHot to what
// wire.ReadMethod decodes, or are left to it (nil) when it refuses them;
// other methods are left to it.
func TestReadHotAsReadMethod(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	keys := []string{"", "q", "bench", strings.Repeat("k", 255)}
	ch := &channel{}
	for i := range 20_000 {
		var m wire.Method
		switch i % 3 {
		case 0:
			m = &wire.BasicPublish{Reserved1: uint16(rng.IntN(3)), Exchange: keys[rng.IntN(len(keys))], RoutingKey: keys[rng.IntN(len(keys))],
				Mandatory: rng.IntN(2) == 0, Immediate: rng.IntN(2) == 0}
		case 1:
			m = &wire.BasicAck{DeliveryTag: rng.Uint64(), Multiple: rng.IntN(2) == 0}
		default:
			m = &wire.BasicNack{DeliveryTag: rng.Uint64(), Multiple: true, Requeue: true}
		}
		p := wire.AppendMethod(nil, m)
		switch rng.IntN(4) {
		case 0:
			p = p[:rng.IntN(len(p)+1)]
		case 1:
			p = append(p, byte(rng.IntN(256)))
		}
		want, err := wire.ReadMethod(p)
		got := ch.readHot(p)
		switch {
		case err != nil && got != nil:
			t.Fatalf("% x: readHot decoded %#v, ReadMethod refused it: %v", p, got, err)
		case got == nil && err == nil && (isBasicPublish(p) || isBasicAck(p)):
			t.Fatalf("% x: readHot left %s to ReadMethod", p, want.Name())
		case got != nil && !reflect.DeepEqual(got, want):
			t.Fatalf("% x: readHot %#v, ReadMethod %#v", p, got, want)
		}
	}
}

// TestReadHotAllocates: a channel's publish to the routing key of its
// publish before, and an ack, are decoded without allocating.
func TestReadHotAllocates(t *testing.T) {
	ch := &channel{}
	pub := wire.AppendMethod(nil, &wire.BasicPublish{RoutingKey: "bench"})
	ack := wire.AppendMethod(nil, &wire.BasicAck{DeliveryTag: 7})
	ch.readHot(pub)
	allocs := testing.AllocsPerRun(1000, func() {
		if m, ok := ch.readHot(pub).(*wire.BasicPublish); !ok || m.RoutingKey != "bench" {
			t.Fatalf("publish decoded as %#v", m)
		}
		if m, ok := ch.readHot(ack).(*wire.BasicAck); !ok || m.DeliveryTag != 7 {
			t.Fatalf("ack decoded as %#v", m)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per publish and ack decoded", allocs)
	}
}

// TestContentHeaderAllocates: a publish's content header is kept in the
// channel's own Header: taking one allocates only the copy of its raw
// properties (which the message keeps), not a Header per message.
func TestContentHeaderAllocates(t *testing.T) {
	c := &conn{srv: &Server{cfg: Config{MaxMessageBytes: 1 << 20}}}
	ch := newChannel(c, 1)
	props := wire.BasicProperties{Flags: wire.FlagDeliveryMode, DeliveryMode: 2}
	var w wire.Writer
	props.Write(&w)
	hdr := wire.Frame{Type: wire.FrameHeader, Channel: 1, Payload: wire.AppendHeader(nil, 1024, w.Buf)}
	pub := wire.BasicPublish{RoutingKey: "bench"}
	allocs := testing.AllocsPerRun(1000, func() {
		ch.pub, ch.hdr = &pub, nil
		if err := ch.content(hdr); err != nil {
			t.Fatal(err)
		}
		if ch.hdr == nil || ch.hdr.BodySize != 1024 || ch.hdr.Props.DeliveryMode != 2 {
			t.Fatalf("header taken as %+v", ch.hdr)
		}
	})
	if allocs > 1 {
		t.Fatalf("%.1f allocations per content header", allocs)
	}
}

// TestParseMessageLike: a stored message parsed like the one before it
// decodes to what parseMessage decodes, taking the earlier strings
// without allocating when they are the same bytes, and new ones when not.
func TestParseMessageLike(t *testing.T) {
	const topic = "%AMQP%t"
	rec := func(exch, key string) []byte {
		b, err := record.AppendEnvelope(nil, record.AMQP, 1, []record.Dest{{Topic: topic, QueueID: queueID}},
			appendMessage(nil, &storedMessage{exchange: exch, routingKey: key, props: []byte{0x10, 0, 2}, body: []byte("body")}))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	like := storedMessage{exchange: "amq.direct", routingKey: "bench"}
	for _, c := range []struct{ exch, key string }{{"amq.direct", "bench"}, {"", "bench"}, {"amq.direct", "other"}, {"x", "y"}} {
		r := rec(c.exch, c.key)
		want, err := parseMessage(r, topic, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := parseMessageLike(r, topic, 0, &like)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v: parsed %+v (%v), want %+v", c, got, err, want)
		}
	}
	r := rec("amq.direct", "bench")
	allocs := testing.AllocsPerRun(1000, func() {
		if m, err := parseMessageLike(r, topic, 0, &like); err != nil || m.routingKey != "bench" {
			t.Fatalf("parsed %+v (%v)", m, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%.1f allocations per message parsed like the one before", allocs)
	}
}
