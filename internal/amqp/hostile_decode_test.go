package amqp

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/heapwatch"
)

// hostileTable is a table of one field, an array of n void elements: the
// most heap per wire byte a table can ask for (one byte per element, each
// a 16-byte interface).
func hostileTable(n int) wire.Table { return wire.Table{"a": make([]any, n)} }

// wideTable is a table of n void fields with distinct keys.
func wideTable(n int) wire.Table {
	t := wire.Table{}
	for i := range n {
		t[fmt.Sprintf("%04x", i)] = nil
	}
	return t
}

// deepTable nests depth tables.
func deepTable(depth int) wire.Table {
	t := wire.Table{}
	for range depth - 1 {
		t = wire.Table{"n": t}
	}
	return t
}

// hostileAMQPRequest is one crafted request after channel.open on channel
// 1, and the connection exception it must get.
type hostileAMQPRequest struct {
	name  string
	bytes []byte
	code  uint16
}

func hostileAMQPRequests(frameMax int) []hostileAMQPRequest {
	room := frameMax - wire.FrameOverheadBytes - 64 // payload bytes left for the table
	declare := func(args wire.Table) []byte {
		return wire.AppendMethodFrame(nil, 1, &wire.QueueDeclare{Queue: "q", Arguments: args})
	}
	publish := func(headers wire.Table) []byte {
		var w wire.Writer
		(&wire.BasicProperties{Flags: wire.FlagHeaders, Headers: headers}).Write(&w)
		b := wire.AppendMethodFrame(nil, 1, &wire.BasicPublish{RoutingKey: "q"})
		return wire.AppendFrame(b, wire.FrameHeader, 1, wire.AppendHeader(nil, 1, w.Buf))
	}
	return []hostileAMQPRequest{
		{"queue.declare arguments of void elements", declare(hostileTable(room)), wire.SyntaxError},
		{"queue.declare arguments nested too deep", declare(deepTable(wire.MaxTableDepth + 1)), wire.SyntaxError},
		{"content header of void elements", publish(hostileTable(room)), wire.FrameError},
		{"content header of distinct void fields", publish(wideTable(room / 6)), wire.FrameError},
	}
}

// hostileRound opens a connection with frame-max frameMax, sends req on a
// new channel and checks the connection exception it gets.
func hostileRound(addr string, frameMax uint32, req hostileAMQPRequest) error {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	fr := wire.NewFrameReader(nc)
	method := func() (wire.Method, error) {
		for {
			f, err := fr.ReadFrame(1 << 20)
			if err != nil {
				return nil, err
			}
			if f.Type == wire.FrameMethod {
				return wire.ReadMethod(f.Payload)
			}
		}
	}
	steps := [][]byte{
		wire.ProtocolHeader,
		wire.AppendMethodFrame(nil, 0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US"}),
		append(wire.AppendMethodFrame(nil, 0, &wire.ConnectionTuneOk{ChannelMax: 10, FrameMax: frameMax}),
			wire.AppendMethodFrame(nil, 0, &wire.ConnectionOpen{VirtualHost: "/"})...),
		wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}),
	}
	for _, b := range steps { // each answered by one method: start, tune, open-ok, channel open-ok
		if _, err := nc.Write(b); err != nil {
			return err
		}
		if _, err := method(); err != nil {
			return fmt.Errorf("handshake: %w", err)
		}
	}
	if _, err := nc.Write(req.bytes); err != nil {
		return err
	}
	m, err := method()
	if err != nil {
		return fmt.Errorf("%s: %w", req.name, err)
	}
	cl, ok := m.(*wire.ConnectionClose)
	if !ok || cl.ReplyCode != req.code {
		return fmt.Errorf("%s: got %s %+v, want connection.close %d", req.name, m.Name(), m, req.code)
	}
	if req.code != wire.SyntaxError || !strings.Contains(req.name, "deep") {
		if !strings.Contains(cl.ReplyText, "field table decodes to more than") {
			return fmt.Errorf("%s: close %q does not say why", req.name, cl.ReplyText)
		}
	}
	nc.Write(wire.AppendMethodFrame(nil, 0, &wire.ConnectionCloseOk{}))
	return nil
}

// TestHostileTablesUnderLoad: sixteen connections at once keep sending
// the costliest tables that fit in a 128 KiB frame (queue.declare
// arguments and content-header headers of 130,000 void array elements or
// 21,000 void fields, and arguments nested one level too deep), while an
// amqp091-go client publishes with confirms and consumes. Each is refused
// with its connection exception (502 SYNTAX_ERROR in a method, 501
// FRAME_ERROR in a content header, saying why) before the table is built,
// where each used to decode to 11 MiB; the peak heap stays within a
// bound of a megabyte per hostile connection, and every message published
// meanwhile is delivered.
func TestHostileTablesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("sends 100s of MiB")
	}
	b := startBroker(t)
	ch := b.channel()
	if _, err := ch.QueueDeclare("legit", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, err := ch.Consume("legit", "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := b.channel()
	publishConfirmed(t, pub, "legit", "warm-up")
	recv(t, deliveries)

	const conns = 16
	frameMax := uint32(DefaultMaxFrameBytes)
	reqs := hostileAMQPRequests(int(frameMax))
	minRounds := int64(5 * len(reqs)) // each request five times per connection
	base := heapwatch.Now()
	stopWatch := heapwatch.Watch()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rounds [conns]atomic.Int64
	errs := make(chan error, conns)
	for i := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := hostileRound(b.addr, frameMax, reqs[(i+n)%len(reqs)]); err != nil {
					errs <- err
					return
				}
				rounds[i].Add(1)
			}
		}()
	}
	var bodies []string
	for i := range 50 {
		bodies = append(bodies, fmt.Sprintf("m%d", i))
	}
	publishConfirmed(t, pub, "legit", bodies...)
	for _, want := range bodies {
		if d := recv(t, deliveries); string(d.Body) != want {
			t.Fatalf("delivered %q, want %q", d.Body, want)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; i < conns && time.Now().Before(deadline); {
		if rounds[i].Load() >= minRounds || len(errs) > 0 {
			i++
			continue
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	peak := stopWatch()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range rounds {
		if n := rounds[i].Load(); n < minRounds {
			t.Errorf("hostile connection %d: %d rounds", i, n)
		}
	}
	// Live per hostile connection: a frame of 128 KiB and the connection's
	// buffers. The collector lets the heap grow to twice what was live at
	// the last collection before it collects again (GOGC=100).
	bound := 2 * (base + conns<<20)
	t.Logf("heap %d MiB before, peak %d MiB under %d hostile connections (bound %d MiB)", base>>20, peak>>20, conns, bound>>20)
	if peak > bound {
		t.Fatalf("peak heap %d MiB, above the bound of %d MiB (%d MiB before the attack)", peak>>20, bound>>20, base>>20)
	}
	var closeErr *amqp091.Error
	if err := pub.Close(); err != nil && !errors.As(err, &closeErr) {
		t.Fatal(err)
	}
}
