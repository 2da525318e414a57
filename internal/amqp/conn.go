package amqp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqp/wire"
)

// conn is one client connection. Its reader goroutine (serve) decodes
// frames and runs every method; writes come from it, from queue pumps
// delivering to its consumers and from the heartbeat ticker, each one
// whole frame sequence under wmu.
type conn struct {
	srv *Server
	nc  net.Conn
	br  *bufio.Reader // over nc: the handshake and every frame read from it
	fr  *wire.FrameReader

	// wantsBlocked: the client takes connection.blocked (its
	// capabilities say so); set once the connection is open.
	wantsBlocked atomic.Bool
	// blockMu orders what syncBlocked sends; blockedSent is whether the
	// last of it was connection.blocked (guarded by blockMu).
	blockMu     sync.Mutex
	blockedSent bool

	frameMax   uint32 // negotiated (both directions)
	channelMax uint16 // negotiated: the server's, or the client's if lower
	heartbeat  time.Duration
	user       string
	secret     string       // the password the client logged in with (forward.go dials as the client)
	acct       *acl.Account // permissions (auth.go); nil: everything
	vh         *vhost       // the vhost connection.open chose (set before any channel)
	// shown is what operators see of the connection once it is open (mgmt.go).
	shown atomic.Pointer[connShown]
	// forced is set when an operator closes the connection (ForceClose):
	// the reader, woken by a read deadline in the past, sends it as
	// connection.close instead of reading on.
	forced atomic.Pointer[amqpError]

	wmu  sync.Mutex
	wbuf []byte
	werr error
	// held are deliveries a queue pump wrote but holds back to send with
	// the next ones in one write (flushHeld at the pump's end); any other
	// write sends them first, so the order of frames is kept.
	held []byte

	chMu     sync.Mutex
	channels map[uint16]*channel

	fwd      connForward // connections to other groups' doors (forward.go)
	fromPeer bool        // another group's door forwarding for its client: nothing is forwarded on

	// What Connections reports (info.go): since is set at accept; the
	// user and vhost once negotiated, under infoMu (the reader writes
	// them, Connections reads them from another goroutine). infoSecret
	// and infoRules are the password the user logged in with (or updated
	// to) and the rules it was last checked against (revoke.go; nil: not
	// logged in, or nothing to check again).
	since      time.Time
	infoMu     sync.Mutex
	infoUser   string
	infoVhost  string
	infoSecret string
	infoRules  *acl.Rules
	exLimit    exceptionLimiter // bounds the exceptions logged (errors.go)

	done    chan struct{}
	cleaned bool // reader goroutine only

	// publishSlots bounds the publishes stored and not yet confirmed.
	publishSlots chan struct{}
	// bodyHeld is the bytes the connection's channels hold in the frame
	// budget for bodies arriving now (reserveBody); while it is above 0
	// the connection's frames are read on that account, unclaimed
	// (claimFrame). Reader goroutine only.
	bodyHeld int64
	// pubIssued (reader only) counts the publishes handed to the store,
	// pubDone those whose confirmer step (stored) ran; pubSig is kicked at
	// each. A method that must see the connection's earlier publishes
	// waits for pubDone to catch up (waitPublishes).
	pubIssued uint64
	pubDone   atomic.Uint64
	pubSig    chan struct{}
	// batch holds the publishes of the read burst not yet stored
	// (publishbatch.go); reader goroutine only.
	batch pubBatch
	// pumps are the queues whose deliveries the settlements of the read
	// burst made possible (pumpLater); reader goroutine only.
	pumps pumpSet
	// pendingDL counts the dead-letter copies of this connection's
	// rejects not yet in their queues (waitPublishes waits for them too).
	pendingDL atomic.Int64
	// The confirmer: work (confirms, deliveries of new messages) queued by
	// the store's acknowledger, which must not block, run in order on a
	// goroutine of the connection's own.
	laterMu   sync.Mutex
	laterQ    []func()
	laterKick chan struct{}
	laterDone chan struct{}
	// acking (confirmer only): channels with publisher acks not yet sent;
	// flushAcks sends one basic.ack (multiple) per channel after each run
	// of queued work, and before anything on the confirmer blocks.
	acking []*channel
	// ackPumps (confirmer only): queues to pump once the acks of the
	// current run of queued work went out (pumpAfterAcks).
	ackPumps pumpSet
}

// pumpSet is the queues whose pumps are to run, each once, in the order
// they were noted.
type pumpSet []*queue

func (p *pumpSet) add(q *queue) {
	if !slices.Contains(*p, q) {
		*p = append(*p, q)
	}
}

// run runs the pumps and empties the set.
func (p *pumpSet) run() {
	for i, q := range *p {
		q.pump()
		(*p)[i] = nil
	}
	*p = (*p)[:0]
}

// maxPendingPublishes bounds a connection's publishes awaiting their
// confirm; the reader waits for a slot (backpressure on the client).
const maxPendingPublishes = 1024

// later queues fn for the confirmer; it never blocks.
func (c *conn) later(fn func()) {
	c.laterMu.Lock()
	c.laterQ = append(c.laterQ, fn)
	c.laterMu.Unlock()
	select {
	case c.laterKick <- struct{}{}:
	default:
	}
}

// publishDone counts one stored publish as through its confirmer step.
func (c *conn) publishDone() {
	c.pubDone.Add(1)
	select {
	case c.pubSig <- struct{}{}:
	default:
	}
}

// deadLetterDone counts one dead-letter copy of a reject as done.
func (c *conn) deadLetterDone() {
	c.pendingDL.Add(-1)
	select {
	case c.pubSig <- struct{}{}:
	default:
	}
}

// waitPublishes waits until every publish the connection sent before is
// in its queues (or failed), so that basic.get, queue.declare's counts,
// queue.purge and queue.delete see them, as AMQP's ordering on a channel
// promises; and so are the dead-letter copies of its rejects.
func (c *conn) waitPublishes() error {
	for c.pubDone.Load() < c.pubIssued || c.pendingDL.Load() > 0 {
		select {
		case <-c.pubSig:
		case <-c.srv.stop:
			return errConnClosed
		}
	}
	return nil
}

// runConfirmer runs the queued work until the connection ends.
func (c *conn) runConfirmer() {
	defer close(c.laterDone)
	for {
		select {
		case <-c.done:
			return
		case <-c.laterKick:
		}
		for {
			c.laterMu.Lock()
			q := c.laterQ
			c.laterQ = nil
			c.laterMu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, fn := range q {
				fn()
			}
			c.flushAcks()
			c.flushAckPumps()
		}
	}
}

// pumpAfterAcks notes that q has new messages to deliver, once the acks
// held back went out (confirmer only).
func (c *conn) pumpAfterAcks(q *queue) { c.ackPumps.add(q) }

// flushAckPumps runs the pumps pumpAfterAcks noted (confirmer only).
func (c *conn) flushAckPumps() { c.ackPumps.run() }

// readBufferBytes is each connection's read buffer.
const readBufferBytes = 32 << 10

func newConn(s *Server, nc net.Conn) *conn {
	// Reads go through a buffer: a publish is three frames (method,
	// header, body), each read as a header then a payload, so reading the
	// socket directly cost six read syscalls per message.
	br := bufio.NewReaderSize(nc, readBufferBytes)
	return &conn{srv: s, nc: nc, br: br, fr: wire.NewFrameReader(br), frameMax: wire.FrameMinSize, since: time.Now(),
		channels: map[uint16]*channel{}, done: make(chan struct{}),
		publishSlots: make(chan struct{}, maxPendingPublishes), pubSig: make(chan struct{}, 1), laterKick: make(chan struct{}, 1), laterDone: make(chan struct{})}
}

// serve runs the connection to its end.
func (c *conn) serve() {
	defer c.nc.Close()
	go c.runConfirmer()
	defer func() { <-c.laterDone }() // after cleanup closed done
	defer c.cleanup()
	c.nc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := c.handshake(); err != nil {
		c.fail(err)
		return
	}
	c.nc.SetDeadline(time.Time{})
	if c.heartbeat > 0 {
		go c.beat()
	}
	for {
		if !c.frameBuffered() {
			// The burst read so far is handled: its publishes are stored
			// before the reader may wait for the socket, and the read
			// deadline is set once per burst, not per frame.
			c.flushPublishes()
			c.flushPumps()
			if c.heartbeat > 0 {
				c.nc.SetReadDeadline(time.Now().Add(3 * c.heartbeat))
			}
		}
		// After the deadline is set: a ForceClose whose deadline this one
		// overwrote is seen here (it stores forced before its deadline).
		if e := c.forced.Load(); e != nil {
			c.closeWith(e)
			return
		}
		claimed, err := c.claimFrame()
		if err != nil {
			if e := c.forced.Load(); e != nil {
				c.closeWith(e)
			}
			return // the socket failed, or the server is closing
		}
		f, err := c.fr.ReadFrame(c.frameMax)
		if err != nil {
			c.returnFrameClaim(claimed)
			if e := c.forced.Load(); e != nil {
				c.closeWith(e)
				return
			}
			c.fail(frameError(err))
			return
		}
		c.countFrame(f)
		err = c.frame(f)
		c.returnFrameClaim(claimed)
		if err != nil {
			if errors.Is(err, errConnClosed) {
				return
			}
			c.fail(err)
			return
		}
	}
}

// frameBuffered reports whether the next frame is whole in the read
// buffer, so that reading it does not wait for the socket.
func (c *conn) frameBuffered() bool {
	n := c.br.Buffered()
	if n < wire.FrameHeaderBytes {
		return false
	}
	h, _ := c.br.Peek(wire.FrameHeaderBytes)
	return int64(n) >= int64(binary.BigEndian.Uint32(h[3:]))+wire.FrameOverheadBytes
}

// claimFrame claims the next frame's bytes (Config.FrameBudget) once its
// 7-byte header has arrived and returns how many it claimed; a size beyond
// frame-max is left for ReadFrame to refuse.
func (c *conn) claimFrame() (int64, error) {
	fb := c.srv.cfg.FrameBudget
	if fb == nil || c.bodyHeld > 0 {
		// With a body's reservation held, a frame waiting for budget
		// could wait for bytes only this connection's own body would
		// release: its frames (at most frame-max each, one at a time)
		// are read on the reservation's account instead.
		return 0, nil
	}
	h, err := c.br.Peek(7)
	if err != nil {
		return 0, err
	}
	n := int64(binary.BigEndian.Uint32(h[3:]))
	if n > int64(c.frameMax) {
		return 0, nil
	}
	if !fb.ClaimBytes(n+wire.FrameOverheadBytes, c.srv.stop) {
		return 0, net.ErrClosed
	}
	return n + wire.FrameOverheadBytes, nil
}

// returnFrameClaim gives back what claimFrame claimed.
func (c *conn) returnFrameClaim(n int64) {
	if n > 0 {
		c.srv.cfg.FrameBudget.ReleaseBytes(n)
	}
}

var errConnClosed = errors.New("amqp: connection closed by the client")

// frameError turns a read error into what to answer: a protocol error for
// bad bytes, the error itself (close silently) for I/O.
func frameError(err error) error {
	switch {
	case errors.Is(err, wire.ErrFrameTooLarge), errors.Is(err, wire.ErrMalformed):
		return hard(wire.FrameError, nil, "%v", err)
	}
	return err
}

// fail ends the connection: a protocol error is answered with
// connection.close and the socket is closed after close-ok or a short wait.
func (c *conn) fail(err error) {
	var ae *amqpError
	if !errors.As(err, &ae) {
		return
	}
	c.srv.cfg.Traffic.Error()
	c.logException(0, ae)
	c.closeWith(ae)
}

// closeWith sends connection.close with ae and reads (dropping what comes)
// until the client's close-ok or a second has passed.
func (c *conn) closeWith(ae *amqpError) {
	c.send(0, &wire.ConnectionClose{ReplyCode: ae.code, ReplyText: ae.replyText(), ClassId: ae.classID, MethodId: ae.methodID})
	c.nc.SetReadDeadline(time.Now().Add(time.Second))
	for {
		f, err := c.fr.ReadFrame(c.frameMax)
		if err != nil {
			return
		}
		if f.Type == wire.FrameMethod && f.Channel == 0 {
			if m, err := wire.ReadMethod(f.Payload); err == nil {
				if _, ok := m.(*wire.ConnectionCloseOk); ok {
					return
				}
			}
		}
	}
}

// closeLinger bounds how long a connection is read after its close-ok.
const closeLinger = 3 * time.Second

// linger runs after close-ok: the client may still be writing (publishes
// sent before it read the close-ok), and closing a socket with unread
// bytes resets it, which can make the client lose the close-ok. So the
// write side is shut (the client reads close-ok, then the end of the
// stream) and whatever comes is read and dropped until the client closes
// or closeLinger passes, as RabbitMQ does.
func (c *conn) linger() {
	c.wmu.Lock()
	if cw, ok := c.nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.wmu.Unlock()
	c.nc.SetReadDeadline(time.Now().Add(closeLinger))
	io.Copy(io.Discard, c.br)
}

// cleanup requeues every channel's unacknowledged deliveries, cancels the
// consumers and deletes the connection's exclusive queues.
func (c *conn) cleanup() {
	if c.cleaned {
		return
	}
	c.cleaned = true
	c.flushPublishes() // received whole: stored as they would have been alone
	c.flushPumps()
	close(c.done)
	c.chMu.Lock()
	chs := c.channels
	c.channels = map[uint16]*channel{}
	c.chMu.Unlock()
	for _, ch := range chs {
		ch.shutdown()
		ch.dropBody()
	}
	if c.vh != nil {
		c.vh.connClosed(c)
	}
	c.closeUpstreams() // forward.go
}

func (c *conn) beat() {
	t := time.NewTicker(c.heartbeat / 2)
	defer t.Stop()
	hb := wire.AppendFrame(nil, wire.FrameHeartbeat, 0, nil)
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if c.write(hb) != nil {
				return
			}
		}
	}
}

// write writes whole frames.
func (c *conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(b)
}

func (c *conn) writeLocked(b []byte) error {
	if c.werr != nil {
		return c.werr
	}
	if len(c.held) > 0 {
		b = append(c.held, b...)
		c.held = c.held[:0]
		if cap(c.held) > 1<<20 {
			c.held = nil
		}
	}
	if len(b) == 0 {
		return nil
	}
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	n, err := c.nc.Write(b)
	c.srv.cfg.Traffic.Out(n)
	if err != nil {
		c.werr = err
		c.nc.Close()
		return err
	}
	return nil
}

// countFrame counts a frame read: its bytes (header, payload, end octet)
// and, for a method, a request.
func (c *conn) countFrame(f wire.Frame) {
	tr := c.srv.cfg.Traffic
	tr.In(8 + len(f.Payload))
	if f.Type == wire.FrameMethod {
		tr.Request()
	}
}

// send writes one method frame.
func (c *conn) send(ch uint16, m wire.Method) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = wire.AppendMethodFrame(c.wbuf[:0], ch, m)
	return c.writeLocked(c.wbuf)
}

// maxHeldBytes bounds the deliveries a connection holds back.
const maxHeldBytes = 64 << 10

// sendDeliverHeld is sendContent of basic.deliver for a queue pump: the
// frames are held back (up to maxHeldBytes) until flushHeld or the next
// write. m is not kept (the caller's may be on its stack).
func (c *conn) sendDeliverHeld(ch uint16, m *wire.BasicDeliver, props, body []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if len(body) >= largeBodyBytes {
		large := *m // through the Method interface: a copy of its own
		return c.writeLargeContentLocked(ch, &large, props, body)
	}
	c.held = wire.AppendDeliverFrame(c.held, ch, m)
	c.held = appendBodyFrames(appendHeaderFrame(c.held, ch, uint64(len(body)), props), c.frameMax, ch, body)
	if len(c.held) >= maxHeldBytes {
		return c.writeLocked(nil)
	}
	return nil
}

// flushHeld writes the deliveries held back.
func (c *conn) flushHeld() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeLocked(nil)
}

// largeBodyBytes is the body size from which a content's body frames are
// written from the body itself (writeLargeContentLocked) instead of being
// copied into one buffer first: a 100 MiB message then costs no second
// 100 MiB on its way out.
const largeBodyBytes = 256 << 10

// largeWriteFrames is how many body frames one vectored write of a large
// content carries (each write gets its own writeTimeout).
const largeWriteFrames = 64

// writeLargeContentLocked writes a method with a large content under wmu:
// what is held and the method and header frames in one write, then the
// body frames as vectored writes of each frame's 7-byte header, its slice
// of body and the frame end, largeWriteFrames at a time. No other frame
// can come between them: wmu is held throughout.
func (c *conn) writeLargeContentLocked(ch uint16, m wire.Method, props, body []byte) error {
	b := wire.AppendMethodFrame(c.wbuf[:0], ch, m)
	b = appendHeaderFrame(b, ch, uint64(len(body)), props)
	if err := c.writeLocked(b); err != nil {
		return err
	}
	c.wbuf = b[:0]
	max := int(c.frameMax) - wire.FrameOverheadBytes
	heads := make([]byte, wire.FrameHeaderBytes*largeWriteFrames)
	end := []byte{wire.FrameEnd}
	vec := make(net.Buffers, 0, 3*largeWriteFrames)
	for len(body) > 0 {
		vec = vec[:0]
		for i := 0; i < largeWriteFrames && len(body) > 0; i++ {
			n := min(len(body), max)
			h := heads[i*wire.FrameHeaderBytes : (i+1)*wire.FrameHeaderBytes]
			h[0] = wire.FrameBody
			binary.BigEndian.PutUint16(h[1:], ch)
			binary.BigEndian.PutUint32(h[3:], uint32(n))
			vec = append(vec, h, body[:n], end)
			body = body[n:]
		}
		c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		v := vec // WriteTo consumes its receiver
		n, err := v.WriteTo(c.nc)
		c.srv.cfg.Traffic.Out(int(n))
		if err != nil {
			c.werr = err
			c.nc.Close()
			return err
		}
	}
	return nil
}

// appendHeaderFrame appends a content header frame on channel ch, laid
// out in place (no payload built first).
func appendHeaderFrame(b []byte, ch uint16, bodySize uint64, props []byte) []byte {
	at := len(b)
	b = append(b, wire.FrameHeader, byte(ch>>8), byte(ch), 0, 0, 0, 0)
	b = wire.AppendHeader(b, bodySize, props)
	binary.BigEndian.PutUint32(b[at+3:], uint32(len(b)-at-wire.FrameHeaderBytes))
	return append(b, wire.FrameEnd)
}

// appendContent appends a method with its content header and body frames
// of at most frameMax.
func appendContent(b []byte, frameMax uint32, ch uint16, m wire.Method, props, body []byte) []byte {
	b = wire.AppendMethodFrame(b, ch, m)
	b = appendHeaderFrame(b, ch, uint64(len(body)), props)
	return appendBodyFrames(b, frameMax, ch, body)
}

// appendBodyFrames appends body as body frames of at most frameMax.
func appendBodyFrames(b []byte, frameMax uint32, ch uint16, body []byte) []byte {
	max := int(frameMax) - wire.FrameOverheadBytes
	for len(body) > 0 {
		n := min(len(body), max)
		b = wire.AppendFrame(b, wire.FrameBody, ch, body[:n])
		body = body[n:]
	}
	return b
}

// sendContent writes a method with content: method, header, body frames
// of at most frame-max, in one write so no other frame interleaves.
func (c *conn) sendContent(ch uint16, m wire.Method, props, body []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(body) >= largeBodyBytes {
		return c.writeLargeContentLocked(ch, m, props, body)
	}
	b := wire.AppendMethodFrame(c.wbuf[:0], ch, m)
	b = appendHeaderFrame(b, ch, uint64(len(body)), props)
	max := int(c.frameMax) - wire.FrameOverheadBytes
	for len(body) > 0 {
		n := min(len(body), max)
		b = wire.AppendFrame(b, wire.FrameBody, ch, body[:n])
		body = body[n:]
	}
	c.wbuf = b
	if cap(c.wbuf) > 1<<20 {
		c.wbuf = nil
	}
	return c.writeLocked(b)
}

// readMethod reads the next frame, which must be a method on channel 0 (the
// handshake), skipping heartbeats.
func (c *conn) readMethod() (wire.Method, error) {
	for {
		f, err := c.fr.ReadFrame(c.frameMax)
		if err != nil {
			return nil, frameError(err)
		}
		c.countFrame(f)
		if f.Type == wire.FrameHeartbeat {
			continue
		}
		if f.Type != wire.FrameMethod || f.Channel != 0 {
			return nil, hard(wire.UnexpectedFrame, nil, "frame type %d on channel %d during the handshake", f.Type, f.Channel)
		}
		m, err := wire.ReadMethod(f.Payload)
		if err != nil {
			return nil, hard(wire.SyntaxError, nil, "%v", err)
		}
		return m, nil
	}
}

// handshake negotiates up to connection.open-ok.
func (c *conn) handshake() error {
	var hdr [8]byte
	if _, err := io.ReadFull(c.br, hdr[:]); err != nil {
		return err
	}
	c.srv.cfg.Traffic.In(len(hdr))
	if !bytes.Equal(hdr[:], wire.ProtocolHeader) {
		c.srv.cfg.Traffic.Error()
		c.write(wire.ProtocolHeader)
		return fmt.Errorf("amqp: protocol header % x", hdr)
	}
	c.send(0, &wire.ConnectionStart{VersionMajor: 0, VersionMinor: 9, ServerProperties: serverProperties(),
		Mechanisms: []byte("PLAIN AMQPLAIN"), Locales: []byte("en_US")})
	m, err := c.readMethod()
	if err != nil {
		return err
	}
	so, ok := m.(*wire.ConnectionStartOk)
	if !ok {
		return hard(wire.CommandInvalid, m, "expected connection.start-ok, got %s", m.Name())
	}
	user, pass, err := credentials(so.Mechanism, so.Response)
	if err != nil {
		return hard(wire.AccessRefused, m, "%v", err)
	}
	c.user = user // also for the log line of a refusal
	rules := c.srv.rulesInForce()
	acct, ok := c.srv.authenticate(user, pass, c.nc.RemoteAddr())
	if !ok {
		return hard(wire.AccessRefused, m, "Login was refused using authentication mechanism %s", so.Mechanism)
	}
	c.acct, c.secret = acct, pass
	c.loggedIn(user, pass, rules)                          // revoke.go
	c.fromPeer = so.ClientProperties[peerProperty] == true // forward.go
	caps, _ := so.ClientProperties["capabilities"].(wire.Table)
	wantsBlocked := caps["connection.blocked"] == true
	cfg := &c.srv.cfg
	c.send(0, &wire.ConnectionTune{ChannelMax: cfg.MaxChannels, FrameMax: cfg.MaxFrameBytes, Heartbeat: uint16(cfg.Heartbeat / time.Second)})
	if m, err = c.readMethod(); err != nil {
		return err
	}
	to, ok := m.(*wire.ConnectionTuneOk)
	if !ok {
		return hard(wire.CommandInvalid, m, "expected connection.tune-ok, got %s", m.Name())
	}
	if to.FrameMax != 0 && (to.FrameMax < wire.FrameMinSize || to.FrameMax > cfg.MaxFrameBytes) {
		return hard(wire.SyntaxError, m, "frame-max %d outside %d..%d", to.FrameMax, wire.FrameMinSize, cfg.MaxFrameBytes)
	}
	c.frameMax = cfg.MaxFrameBytes
	if to.FrameMax != 0 {
		c.frameMax = to.FrameMax
	}
	c.channelMax = cfg.MaxChannels
	if to.ChannelMax != 0 {
		c.channelMax = min(to.ChannelMax, cfg.MaxChannels)
	}
	c.heartbeat = time.Duration(to.Heartbeat) * time.Second
	if m, err = c.readMethod(); err != nil {
		return err
	}
	op, ok := m.(*wire.ConnectionOpen)
	if !ok {
		return hard(wire.CommandInvalid, m, "expected connection.open, got %s", m.Name())
	}
	v := c.srv.vhosts[op.VirtualHost]
	if v == nil {
		return hard(wire.NotAllowed, m, "vhost %q not found (this broker serves %s; see amqpVhosts)", op.VirtualHost, c.srv.vhostList())
	}
	c.vh = v
	c.infoMu.Lock()
	c.infoVhost = v.name
	c.infoMu.Unlock()
	c.opened(so)
	if err := c.send(0, &wire.ConnectionOpenOk{}); err != nil {
		return err
	}
	if wantsBlocked {
		c.wantsBlocked.Store(true)
		c.syncBlocked()
	}
	return nil
}

func serverProperties() wire.Table {
	return wire.Table{
		"product":  []byte("Keel"),
		"platform": []byte("Go"),
		"capabilities": wire.Table{
			"publisher_confirms": true, "basic.nack": true, "consumer_cancel_notify": true,
			"authentication_failure_close": true, "per_consumer_qos": true, "exchange_exchange_bindings": true,
			"connection.blocked": true,
		},
	}
}

// credentials decodes a PLAIN ("\0user\0pass", an authorisation id first
// allowed) or AMQPLAIN (a table without its length: LOGIN, PASSWORD)
// response.
func credentials(mech string, resp []byte) (user, pass string, err error) {
	switch mech {
	case "PLAIN":
		parts := bytes.Split(resp, []byte{0})
		if len(parts) != 3 {
			return "", "", errors.New("malformed PLAIN response")
		}
		return string(parts[1]), string(parts[2]), nil
	case "AMQPLAIN":
		var w wire.Writer
		w.LongStr(resp)
		r := wire.NewReader(w.Buf)
		t := r.Table()
		if r.Err() != nil {
			return "", "", errors.New("malformed AMQPLAIN response")
		}
		return tableString(t["LOGIN"]), tableString(t["PASSWORD"]), nil
	}
	return "", "", fmt.Errorf("unknown authentication mechanism %q", mech)
}

func tableString(v any) string {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case string:
		return v
	}
	return ""
}

// frame handles one frame after the handshake.
func (c *conn) frame(f wire.Frame) error {
	if f.Type == wire.FrameHeartbeat {
		if f.Channel != 0 {
			return hard(wire.FrameError, nil, "heartbeat on channel %d", f.Channel)
		}
		return nil
	}
	if f.Type == wire.FrameMethod && !isBasicPublish(f.Payload) {
		// Every method sees the publishes before it stored, as when each
		// was stored on its own (basic.get, a queue's counts, tx.commit).
		c.flushPublishes()
		if !isSettlement(f.Payload) {
			// ... and the deliveries the settlements before it allowed
			// made, as when each queue delivered at once.
			c.flushPumps()
		}
	}
	if f.Channel == 0 {
		return c.connectionMethod(f)
	}
	if f.Type != wire.FrameMethod {
		ch := c.channel(f.Channel)
		if ch == nil {
			return hard(wire.ChannelError, nil, "content frame on channel %d, which is not open", f.Channel)
		}
		return ch.content(f)
	}
	ch := c.channel(f.Channel)
	if ch != nil {
		if m := ch.readHot(f.Payload); m != nil { // hotmethods.go
			return ch.method(m)
		}
	}
	m, err := wire.ReadMethod(f.Payload)
	if err != nil {
		return hard(wire.SyntaxError, nil, "%v", err)
	}
	if op, ok := m.(*wire.ChannelOpen); ok {
		return c.openChannel(f.Channel, op)
	}
	if ch == nil {
		return hard(wire.ChannelError, m, "channel %d is not open", f.Channel)
	}
	return ch.method(m)
}

// isBasicPublish reports whether a method frame's payload is basic.publish.
func isBasicPublish(p []byte) bool {
	class, method := (*wire.BasicPublish).ID(nil)
	return len(p) >= 4 && binary.BigEndian.Uint16(p) == class && binary.BigEndian.Uint16(p[2:]) == method
}

// isSettlement reports whether a method frame's payload is basic.ack,
// basic.nack or basic.reject.
func isSettlement(p []byte) bool {
	class, ack := (*wire.BasicAck).ID(nil)
	_, nack := (*wire.BasicNack).ID(nil)
	_, reject := (*wire.BasicReject).ID(nil)
	if len(p) < 4 || binary.BigEndian.Uint16(p) != class {
		return false
	}
	m := binary.BigEndian.Uint16(p[2:])
	return m == ack || m == nack || m == reject
}

// pumpLater notes that q may deliver again (a settlement gave a consumer
// credit back, or requeued a message): its pump runs once the read burst
// is handled (flushPumps), so that the deliveries a burst of basic.acks
// allows go out together, in one write, not one write per ack. Reader
// goroutine only.
func (c *conn) pumpLater(q *queue) { c.pumps.add(q) }

// flushPumps runs the pumps pumpLater noted. Reader goroutine only.
func (c *conn) flushPumps() { c.pumps.run() }

func (c *conn) connectionMethod(f wire.Frame) error {
	if f.Type != wire.FrameMethod {
		return hard(wire.CommandInvalid, nil, "frame type %d on channel 0", f.Type)
	}
	m, err := wire.ReadMethod(f.Payload)
	if err != nil {
		return hard(wire.SyntaxError, nil, "%v", err)
	}
	switch mm := m.(type) {
	case *wire.ConnectionClose:
		// Release before answering: a client that saw close-ok finds its
		// exclusive queues gone and its unacked messages requeued.
		c.cleanup()
		c.send(0, &wire.ConnectionCloseOk{})
		c.linger()
		return errConnClosed
	case *wire.ConnectionCloseOk:
		return errConnClosed
	case *wire.ConnectionUpdateSecret:
		return c.updateSecret(mm)
	}
	return hard(wire.CommandInvalid, m, "%s on channel 0", m.Name())
}

func (c *conn) channel(id uint16) *channel {
	c.chMu.Lock()
	defer c.chMu.Unlock()
	return c.channels[id]
}

func (c *conn) openChannel(id uint16, m *wire.ChannelOpen) error {
	if id > c.channelMax {
		return hard(wire.ChannelError, m, "channel %d above channel-max %d", id, c.channelMax)
	}
	c.chMu.Lock()
	if _, ok := c.channels[id]; ok {
		c.chMu.Unlock()
		return hard(wire.ChannelError, m, "channel %d is already open", id)
	}
	ch := newChannel(c, id)
	c.channels[id] = ch
	c.chMu.Unlock()
	return c.send(id, &wire.ChannelOpenOk{})
}

// dropChannel forgets a closed channel.
func (c *conn) dropChannel(id uint16) {
	c.chMu.Lock()
	delete(c.channels, id)
	c.chMu.Unlock()
}

// updateSecret is RabbitMQ's connection.update-secret (a client
// refreshing its credentials): the new secret must authenticate the
// connection's user now, as its password at connection.start-ok did;
// then the account's current permissions apply to the connection's next
// methods. A secret that does not is a connection exception, 530
// NOT_ALLOWED as in RabbitMQ.
func (c *conn) updateSecret(m *wire.ConnectionUpdateSecret) error {
	rules := c.srv.rulesInForce()
	acct, ok := c.srv.authenticate(c.user, string(m.NewSecret), c.nc.RemoteAddr())
	if !ok {
		return hard(wire.NotAllowed, m, "New secret was refused for user '%s'", c.user)
	}
	c.acct, c.secret = acct, string(m.NewSecret)
	c.loggedIn(c.user, c.secret, rules) // revoke.go
	c.updateUpstreams(m)                // forward.go
	c.srv.log.Info("amqp: connection updated its secret", "remote", c.nc.RemoteAddr().String(), "user", c.user, "reason", m.Reason)
	return c.send(0, &wire.ConnectionUpdateSecretOk{})
}
