package amqp

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/vfs"
)

// TestPublishBurstOneAppend: the publishes of one read burst are stored
// with one append, in order, and those that fail in the middle of it (an
// unroutable mandatory one, one a full reject-publish queue refuses) get their own basic.return and
// confirm without affecting the others: each publish is confirmed once,
// the failed ones with a nack, and the queue holds the others in publish
// order.
func TestPublishBurstOneAppend(t *testing.T) {
	b := startBroker(t)
	conn := b.dial()
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("full", true, false, false, false, amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	ch.Confirm(false)
	if dc, err := ch.PublishWithDeferredConfirm("", "full", false, false, amqp091.Publishing{Body: []byte("first")}); err != nil || !dc.Wait() {
		t.Fatalf("fill the reject-publish queue: %v", err)
	}

	rc := dialRaw(t, b)
	rc.open()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
	rc.method()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ConfirmSelect{}))
	if m := rc.method(); m.Name() != (&wire.ConfirmSelectOk{}).Name() {
		t.Fatalf("got %s, want confirm.select-ok", m.Name())
	}
	type pub struct {
		key       string
		mandatory bool
		body      string
	}
	pubs := []pub{
		{"q", false, "a"},
		{"nowhere", true, "b"}, // unroutable: basic.return, then ack
		{"q", false, "c"},
		{"full", false, "d"}, // the full reject-publish queue: nack
		{"q", false, "e"},
		{"q", false, "f"},
	}
	var burst []byte
	for _, p := range pubs {
		burst = wire.AppendMethodFrame(burst, 1, &wire.BasicPublish{RoutingKey: p.key, Mandatory: p.mandatory})
		burst = wire.AppendFrame(burst, wire.FrameHeader, 1, wire.AppendHeader(nil, uint64(len(p.body)), []byte{0, 0}))
		burst = wire.AppendFrame(burst, wire.FrameBody, 1, []byte(p.body))
	}
	puts := b.st.Stats().Puts
	rc.send(burst) // one write: one read burst

	want := map[uint64]bool{1: true, 2: true, 3: true, 4: false, 5: true, 6: true}
	got := map[uint64]bool{}
	returned := false
	confirm := func(tag uint64, multiple, ok bool) {
		if _, done := got[tag]; done {
			t.Fatalf("publish %d confirmed twice", tag)
		}
		got[tag] = ok
		for s := uint64(1); multiple && s < tag; s++ {
			if _, done := got[s]; !done {
				got[s] = ok
			}
		}
	}
	for len(got) < len(pubs) {
		f, err := rc.fr.ReadFrame(1 << 20)
		if err != nil {
			t.Fatalf("read: %v (confirms so far %v)", err, got)
		}
		if f.Type != wire.FrameMethod {
			continue
		}
		m, err := wire.ReadMethod(f.Payload)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *wire.BasicReturn:
			if _, done := got[2]; done || m.RoutingKey != "nowhere" {
				t.Fatalf("basic.return %+v after the confirms %v", m, got)
			}
			returned = true
		case *wire.BasicAck:
			confirm(m.DeliveryTag, m.Multiple, true)
		case *wire.BasicNack:
			confirm(m.DeliveryTag, m.Multiple, false)
		default:
			t.Fatalf("unexpected %s", m.Name())
		}
	}
	if !returned {
		t.Fatal("no basic.return for the unroutable mandatory publish")
	}
	for tag, ok := range want {
		if got[tag] != ok {
			t.Fatalf("publish %d: acked %v, want %v (all: %v)", tag, got[tag], ok, got)
		}
	}
	if n := b.st.Stats().Puts - puts; n != 1 {
		t.Fatalf("the burst's four stored messages took %d appends, want 1", n)
	}
	bodies := getAll(t, ch, "q")
	if !bytes.Equal([]byte(strings.Join(bodies, ",")), []byte("a,c,e,f")) {
		t.Fatalf("queue q holds %q, want a, c, e, f in order", bodies)
	}
	if n, _ := ch.QueueDeclarePassive("full", true, false, false, false, amqp091.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}); n.Messages != 1 {
		t.Fatalf("the reject-publish queue holds %d messages, want 1", n.Messages)
	}
}

// TestConfirmsBeforeDeliveries: when the store answers a burst of
// publishes, the connection's confirms of it go out before the deliveries
// it makes possible, even to a consumer on the same connection: a confirm
// waits for the fdatasync, not for the queue's deliveries. (Should the
// burst be read in two parts, each part's confirms precede its own
// deliveries.)
func TestConfirmsBeforeDeliveries(t *testing.T) {
	b := startBroker(t)
	rc := dialRaw(t, b)
	rc.open()
	for id := uint16(1); id <= 2; id++ {
		rc.send(wire.AppendMethodFrame(nil, id, &wire.ChannelOpen{}))
		rc.method()
	}
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.QueueDeclare{Queue: "q", Durable: true}))
	if m := rc.method(); m.Name() != (&wire.QueueDeclareOk{}).Name() {
		t.Fatalf("got %s, want queue.declare-ok", m.Name())
	}
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ConfirmSelect{}))
	if m := rc.method(); m.Name() != (&wire.ConfirmSelectOk{}).Name() {
		t.Fatalf("got %s, want confirm.select-ok", m.Name())
	}
	rc.send(wire.AppendMethodFrame(nil, 2, &wire.BasicConsume{Queue: "q", ConsumerTag: "c"}))
	if m := rc.method(); m.Name() != (&wire.BasicConsumeOk{}).Name() {
		t.Fatalf("got %s, want basic.consume-ok", m.Name())
	}
	const n = 4
	var burst []byte
	for i := range n {
		body := fmt.Sprintf("m%d", i)
		burst = wire.AppendMethodFrame(burst, 1, &wire.BasicPublish{RoutingKey: "q"})
		burst = wire.AppendFrame(burst, wire.FrameHeader, 1, wire.AppendHeader(nil, uint64(len(body)), []byte{0, 0}))
		burst = wire.AppendFrame(burst, wire.FrameBody, 1, []byte(body))
	}
	rc.send(burst)

	var order []string // "ack N" and "deliver" as they arrive
	confirmed, delivered := uint64(0), 0
	for confirmed < n || delivered < n {
		m := rc.method()
		switch m := m.(type) {
		case *wire.BasicAck:
			if !m.Multiple && m.DeliveryTag != confirmed+1 {
				t.Fatalf("ack of %d after %d", m.DeliveryTag, confirmed)
			}
			confirmed = m.DeliveryTag
			order = append(order, fmt.Sprintf("ack %d", m.DeliveryTag))
		case *wire.BasicDeliver:
			delivered++
			if confirmed < uint64(delivered) { // the queue holds them in publish order
				t.Fatalf("message %d was delivered before its confirm (so far: %v)", delivered, order)
			}
			order = append(order, "deliver")
			rc.fr.ReadFrame(1 << 20) // its header
			rc.fr.ReadFrame(1 << 20) // its body
		default:
			t.Fatalf("unexpected %s (so far: %v)", m.Name(), order)
		}
	}
}

// TestPublishBurstPowerLoss: amqp091-go publishes with 256 confirms in
// flight (so the reader stores bursts of several publishes with one
// append) while the power goes just before one of the CommitLog's
// fdatasyncs (the store and the broker's files on a simulated disk that
// keeps only what was synced, torn unsynced writes). After a restart on
// what the disk kept, every publish confirmed before the power went is in
// the queue, and the queue holds only published messages, each once, in
// publish order: no batch is confirmed before it is durable, and none is
// partly lost before another.
func TestPublishBurstPowerLoss(t *testing.T) {
	const total, window = 3000, 256
	for round := range 6 {
		mem := vfs.NewMem()
		rng := rand.New(rand.NewPCG(uint64(round), 11))
		var mu sync.Mutex
		confirmed := map[uint64]bool{} // delivery tags acked
		var atLoss map[uint64]bool     // those acked when the power went
		var lost *vfs.MemFS
		var armed atomic.Bool
		hooked := syncHookFS{FS: mem, hook: func(name string) {
			if strings.Contains(name, "commitlog") && armed.CompareAndSwap(true, false) {
				mu.Lock()
				atLoss = maps.Clone(confirmed)
				mu.Unlock()
				lost = mem.CrashCloneWith(rng)
			}
		}}
		b := &broker{t: t, dir: "/keel", fs: mem, storeCfg: func(c *store.Config) { c.FS = hooked }}
		b.start()
		ch := b.channel()
		if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.Confirm(false); err != nil {
			t.Fatal(err)
		}
		acks := ch.NotifyPublish(make(chan amqp091.Confirmation, total))
		armAt := 300 + round*400
		slots := make(chan struct{}, window)
		go func() {
			for c := range acks {
				mu.Lock()
				if c.Ack {
					confirmed[c.DeliveryTag] = true
				}
				n := len(confirmed)
				mu.Unlock()
				if n == armAt {
					armed.Store(true)
				}
				<-slots
			}
		}()
		puts := b.st.Stats()
		for i := range total {
			slots <- struct{}{}
			if err := ch.Publish("", "q", false, false, amqp091.Publishing{DeliveryMode: amqp091.Persistent, Body: []byte(fmt.Sprintf("m-%05d", i))}); err != nil {
				t.Fatal(err)
			}
		}
		for range window {
			slots <- struct{}{} // every publish confirmed
		}
		st := b.st.Stats()
		appends, msgs := st.Puts-puts.Puts, st.PutMessages-puts.PutMessages
		b.stop()
		if lost == nil {
			t.Fatalf("round %d: no CommitLog sync after %d confirms", round, armAt)
		}
		if appends >= msgs {
			t.Fatalf("round %d: %d messages took %d appends: no burst was stored with one append", round, msgs, appends)
		}
		after := &broker{t: t, dir: "/keel", fs: lost, storeCfg: func(c *store.Config) { c.FS = lost }}
		after.start()
		obs := after.channel()
		next, found := 0, 0
		for {
			d, ok, err := obs.Get("q", true)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			var i int
			if _, err := fmt.Sscanf(string(d.Body), "m-%05d", &i); err != nil || i < next || i >= total {
				t.Fatalf("round %d: after the power loss the queue holds %q after m-%05d", round, d.Body, next-1)
			}
			if atLoss[uint64(i)+1] {
				found++
			}
			next = i + 1
		}
		after.stop()
		if found != len(atLoss) {
			t.Fatalf("round %d: %d of the %d publishes confirmed before the power went are in the queue", round, found, len(atLoss))
		}
		t.Logf("round %d: %d messages in %d appends; %d confirmed before the power went, all there; the queue kept the first %d", round, msgs, appends, len(atLoss), next)
	}
}

// deadlineConn counts the read deadlines the server sets on a connection.
type deadlineConn struct {
	net.Conn
	n *atomic.Int64
}

func (c deadlineConn) SetReadDeadline(t time.Time) error {
	c.n.Add(1)
	return c.Conn.SetReadDeadline(t)
}

type deadlineListener struct {
	net.Listener
	n *atomic.Int64
}

func (l deadlineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return deadlineConn{c, l.n}, nil
}

// TestReadDeadlinePerBurst: with heartbeats on, the reader sets its read
// deadline once per read from the socket, not once per frame: a burst of
// 50 publishes (150 frames) sent in one write costs a few deadlines.
func TestReadDeadlinePerBurst(t *testing.T) {
	var deadlines atomic.Int64
	b := &broker{t: t, dir: t.TempDir(), wrapListener: func(ln net.Listener) net.Listener { return deadlineListener{ln, &deadlines} }}
	b.start()
	t.Cleanup(b.stop)
	rc := dialRaw(t, b)
	rc.send(wire.ProtocolHeader)
	rc.method() // start
	rc.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionStartOk{Mechanism: "PLAIN", Response: []byte("\x00guest\x00guest"), Locale: "en_US"}))
	rc.method() // tune
	rc.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionTuneOk{ChannelMax: 10, FrameMax: 4096, Heartbeat: 60}))
	rc.send(wire.AppendMethodFrame(nil, 0, &wire.ConnectionOpen{VirtualHost: "/"}))
	rc.method() // open-ok
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
	rc.method()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.QueueDeclare{Queue: "q", Durable: true}))
	rc.method()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ConfirmSelect{}))
	rc.method()
	const n = 50
	var burst []byte
	for i := range n {
		body := []byte(fmt.Sprint("m", i))
		burst = wire.AppendMethodFrame(burst, 1, &wire.BasicPublish{RoutingKey: "q"})
		burst = wire.AppendFrame(burst, wire.FrameHeader, 1, wire.AppendHeader(nil, uint64(len(body)), []byte{0, 0}))
		burst = wire.AppendFrame(burst, wire.FrameBody, 1, body)
	}
	before := deadlines.Load()
	rc.send(burst)
	for acked := uint64(0); acked < n; {
		switch m := rc.method().(type) {
		case *wire.BasicAck:
			acked = m.DeliveryTag
		default:
			t.Fatalf("got %s, want basic.ack", m.Name())
		}
	}
	if got := deadlines.Load() - before; got > 5 {
		t.Fatalf("a burst of %d publishes (%d frames) set %d read deadlines", n, 3*n, got)
	}
}

// TestPublishBurstDiskFull: a burst of confirmed publishes whose one
// append runs out of space in the middle of its records (a short write of
// the CommitLog, then ENOSPC) is nacked whole, each publish once, and
// none of it is stored; the broker stays up, and a later burst on the same
// channel, once space returns, is acked and is all the queue holds, also
// after a restart.
func TestPublishBurstDiskFull(t *testing.T) {
	mem := vfs.NewMem()
	efs := vfs.NewErrorFS(mem)
	b := &broker{t: t, dir: "/keel", fs: mem, storeCfg: func(c *store.Config) {
		c.FS = efs
		c.DiskHardLimitRatio, c.DiskMaxUsedSpaceRatio = 100, 100 // until ENOSPC
		c.DiskReserveBytes = 0
	}}
	b.start()
	t.Cleanup(b.stop)
	ch := b.channel()
	if _, err := ch.QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	rc := dialRaw(t, b)
	rc.open()
	confirmChannel(t, rc)

	const n = 10
	body := strings.Repeat("x", 200)
	// Records of some 200 to 350 bytes: the file takes the first two or
	// three of the burst, and the write fails in the middle of the next.
	efs.Inject(vfs.Rule{Ops: vfs.OpWrite, Path: "commitlog", Times: 1, Err: syscall.ENOSPC, ShortWrite: 700})
	puts := b.st.Stats().Puts
	rc.send(publishBurst("q", body, n))
	order, acked := rawConfirms(t, rc, 1, n, func() {})
	if efs.Injected(vfs.OpWrite) != 1 {
		t.Fatalf("the short write was not the burst's (%d injected)", efs.Injected(vfs.OpWrite))
	}
	for i, tag := range order {
		if tag != uint64(i+1) || acked[tag] {
			t.Fatalf("confirm %d: publish %d (ack %v), want publish %d nacked; order %v", i, tag, acked[tag], i+1, order)
		}
	}
	if k := b.st.Stats().Puts - puts; k != 0 {
		t.Fatalf("%d appends stored for a burst the full disk refused", k)
	}
	if err := b.st.Err(); err != nil {
		t.Fatalf("the store failed on a full disk: %v", err)
	}

	rc.send(publishBurst("q", "after", 3))
	order, acked = rawConfirms(t, rc, n+1, 3, func() {})
	for i, tag := range order {
		if tag != uint64(n+i+1) || !acked[tag] {
			t.Fatalf("after space returned, confirm %d: publish %d (ack %v), want publish %d acked", i, tag, acked[tag], n+i+1)
		}
	}
	held := func(ch *amqp091.Channel) []string {
		t.Helper()
		var bodies []string
		for {
			d, ok, err := ch.Get("q", false)
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				return bodies
			}
			bodies = append(bodies, string(d.Body))
		}
	}
	want := "after-aa,after-ba,after-ca"
	if got := strings.Join(held(ch), ","); got != want {
		t.Fatalf("the queue holds %s, want %s", got, want)
	}
	rc.nc.Close()
	b.restart()
	if got := strings.Join(held(b.channel()), ","); got != want {
		t.Fatalf("after a restart the queue holds %s, want %s", got, want)
	}
}

// getAll takes every message queue holds (auto-ack) and returns their
// bodies in order.
func getAll(t *testing.T, ch *amqp091.Channel, queue string) []string {
	t.Helper()
	var bodies []string
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return bodies
		}
		bodies = append(bodies, string(d.Body))
	}
}

// TestPublishBurstOneAppendClustered: on a broker in a cluster of groups
// (as keel serve runs with a NameServer), the publishes of one read burst
// for queues here are stored with one append too; a publish in the
// middle of the burst for another group's queue keeps its place: the
// ones before it are stored first, those after it with the next append.
func TestPublishBurstOneAppendClustered(t *testing.T) {
	a, b := startPair(t)
	if _, err := a.channel().QueueDeclare("q", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.channel().QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if !declared(a, "q") || !declared(b, "qb") {
		t.Fatal("q is not on a or qb not on b")
	}
	rc := dialRaw(t, a)
	rc.open()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ChannelOpen{}))
	rc.method()
	rc.send(wire.AppendMethodFrame(nil, 1, &wire.ConfirmSelect{}))
	if m := rc.method(); m.Name() != (&wire.ConfirmSelectOk{}).Name() {
		t.Fatalf("got %s, want confirm.select-ok", m.Name())
	}
	pubs := [][2]string{{"q", "a"}, {"q", "b"}, {"q", "c"}, {"qb", "x"}, {"q", "d"}, {"q", "e"}}
	var burst []byte
	for _, p := range pubs {
		burst = wire.AppendMethodFrame(burst, 1, &wire.BasicPublish{RoutingKey: p[0]})
		burst = wire.AppendFrame(burst, wire.FrameHeader, 1, wire.AppendHeader(nil, uint64(len(p[1])), []byte{0, 0}))
		burst = wire.AppendFrame(burst, wire.FrameBody, 1, []byte(p[1]))
	}
	puts := a.st.Stats().Puts
	rc.send(burst) // one write: one read burst
	acked := map[uint64]bool{}
	for len(acked) < len(pubs) {
		switch m := rc.method().(type) {
		case *wire.BasicAck:
			for s := m.DeliveryTag; s > 0 && (s == m.DeliveryTag || m.Multiple); s-- {
				acked[s] = true
			}
		default:
			t.Fatalf("unexpected %s (acked so far %v)", m.Name(), acked)
		}
	}
	if n := a.st.Stats().Puts - puts; n != 2 {
		t.Fatalf("the burst's five messages for a's queue took %d appends, want 2 (one before the forwarded publish, one after)", n)
	}
	if got := strings.Join(getAll(t, a.channel(), "q"), ","); got != "a,b,c,d,e" {
		t.Fatalf("q holds %q, want a,b,c,d,e", got)
	}
	if got := strings.Join(getAll(t, b.channel(), "qb"), ","); got != "x" {
		t.Fatalf("qb holds %q, want x", got)
	}
}
