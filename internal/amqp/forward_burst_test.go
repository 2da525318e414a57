package amqp

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// mandatoryBurst sends the mandatory publishes of bodies to queue in one
// write (one read burst at the broker) on channel 1 of rc, in confirm
// mode, and reads until each is acked; it returns the bodies of the
// basic.returns that came before the acks, in order.
func mandatoryBurst(t *testing.T, rc *rawConn, queue string, bodies []string) []string {
	t.Helper()
	var burst []byte
	for _, body := range bodies {
		burst = wire.AppendMethodFrame(burst, 1, &wire.BasicPublish{RoutingKey: queue, Mandatory: true})
		burst = wire.AppendFrame(burst, wire.FrameHeader, 1, wire.AppendHeader(nil, uint64(len(body)), []byte{0, 0}))
		burst = wire.AppendFrame(burst, wire.FrameBody, 1, []byte(body))
	}
	rc.send(burst)
	var returned []string
	acked := map[uint64]bool{}
	for len(acked) < len(bodies) {
		f, err := rc.fr.ReadFrame(1 << 20)
		if err != nil {
			t.Fatalf("read: %v (acked so far %v)", err, acked)
		}
		switch f.Type {
		case wire.FrameHeartbeat, wire.FrameHeader:
			continue
		case wire.FrameBody:
			returned = append(returned, string(f.Payload))
			continue
		}
		m, err := wire.ReadMethod(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *wire.BasicReturn:
			if m.RoutingKey != queue {
				t.Fatalf("basic.return of key %q, want %q", m.RoutingKey, queue)
			}
		case *wire.BasicAck:
			for s := m.DeliveryTag; s > 0 && (s == m.DeliveryTag || m.Multiple); s-- {
				acked[s] = true
			}
		default:
			t.Fatalf("unexpected %s (acked so far %v)", m.Name(), acked)
		}
	}
	return returned
}

// TestForwardBurstKeepsEachBody: the one-frame bodies of a read burst's
// publishes are the reader's frames, overwritten by the frames after them;
// a publish forwarded to its queue's home keeps its own copy until its
// confirm. The burst's messages reach b's queue each with its own body,
// and, the queue gone there, a burst of mandatory publishes comes back
// with one basic.return per message carrying that message's body.
func TestForwardBurstKeepsEachBody(t *testing.T) {
	a, b := startPair(t)
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, a)
	rc.open()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
	rc.method()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ConfirmSelect{}))
	if m := rc.method(); m.Name() != (&wire.ConfirmSelectOk{}).Name() {
		t.Fatalf("got %s, want confirm.select-ok", m.Name())
	}
	bodies := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s-%02d-%s", prefix, i, strings.Repeat(string(rune('a'+i)), 40)))
		}
		return out
	}
	sent := bodies("stored", 16)
	if ret := mandatoryBurst(t, rc, "qb", sent); len(ret) != 0 {
		t.Fatalf("returned %q while qb is on b", ret)
	}
	if got := getAll(t, b.channel(), "qb"); !slices.Equal(got, sent) {
		t.Fatalf("qb on b holds\n%q\nwant\n%q", got, sent)
	}

	if _, err := b.channel().QueueDelete("qb", false, false, false); err != nil {
		t.Fatal(err)
	}
	lost := bodies("returned", 8)
	ret := mandatoryBurst(t, rc, "qb", lost)
	slices.Sort(ret)
	if !slices.Equal(ret, lost) {
		t.Fatalf("basic.return bodies\n%q\nwant one per publish\n%q", ret, lost)
	}
}
