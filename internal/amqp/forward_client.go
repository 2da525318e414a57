package amqp

// The door's client side (forward.go): an AMQP 0-9-1 connection to
// another group's door, speaking the same byte layer (package wire), so
// a message's raw content properties and body pass through unchanged.
//
// One reader goroutine per upstream connection demultiplexes frames to
// its channels. Synchronous replies (declare-ok, consume-ok, get-ok, ...)
// go to the one method waiting on the channel (the client connection's
// reader: at most one at a time per channel); deliveries, publisher
// confirms and returns are handed to the channel's handlers on the
// reader goroutine, in the order they arrived. Heartbeats are not asked
// for (a dead peer is a failed read or write); every wait is bounded by
// forwardTimeout.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// Limits of the client side.
const (
	// forwardTimeout bounds a dial, the handshake and each synchronous
	// method sent to another group's door.
	forwardTimeout = 15 * time.Second
	// upstreamMaxChannels bounds the channels of one upstream connection
	// (one per client channel that touched the peer, and the look-ups).
	upstreamMaxChannels = 2047
	// watchInterval is how often a connection looks for a publish past
	// confirmTimeout.
	watchInterval = time.Second
)

// confirmTimeout bounds how long a publish waits for its home's confirm:
// a home that takes longer is treated as stuck (the connection is
// closed, what it has not confirmed is nacked). A variable for tests.
var confirmTimeout = 4 * forwardTimeout

// errUpstreamClosed reports that an upstream connection or channel ended.
var errUpstreamClosed = errors.New("amqp: forward: connection to the queue's home closed")

// upstream is one connection to another group's door.
type upstream struct {
	peer     Peer
	nc       net.Conn
	fr       *wire.FrameReader
	frameMax uint32

	wmu  sync.Mutex // one frame sequence at a time
	wbuf []byte

	mu     sync.Mutex
	chans  map[uint16]*upChan
	nextID uint16
	err    error // why it ended (set once, before done closes)

	done chan struct{}
}

// upChan is one channel of an upstream connection.
type upChan struct {
	u  *upstream
	id uint16

	replies chan upReply // the synchronous reply the waiting method gets

	// Reader goroutine only: the content being assembled.
	cm   wire.Method
	hdr  *wire.Header
	body []byte

	// Handlers, set before the channel is used and not changed after;
	// run on the reader goroutine.
	onDeliver func(m *wire.BasicDeliver, props, body []byte)
	onConfirm func(tag uint64, multiple, ack bool)
	onReturn  func(m *wire.BasicReturn, props, body []byte)
	onCancel  func(tag string)
	onEnd     func(err error) // the peer or the connection ended it
	// oldest reports when its oldest unconfirmed publish was sent (zero:
	// none), for the connection's watch.
	oldest func() time.Time

	mu       sync.Mutex
	closed   bool
	closeErr error // the peer's channel.close, or the connection's end
	gone     chan struct{}
}

// upReply is a synchronous reply, with its content for basic.get-ok.
type upReply struct {
	m           wire.Method
	props, body []byte
}

// dialUpstream opens a connection to peer's door (over TLS with
// peer.TLS) as user with pass in vhost.
func dialUpstream(peer Peer, user, pass, vhost string, maxFrame uint32) (*upstream, error) {
	nc, err := dialPeer(peer)
	if err != nil {
		return nil, err
	}
	u := &upstream{peer: peer, nc: nc, fr: wire.NewFrameReader(bufio.NewReaderSize(nc, readBufferBytes)),
		frameMax: wire.FrameMinSize, chans: map[uint16]*upChan{}, done: make(chan struct{})}
	nc.SetDeadline(time.Now().Add(forwardTimeout))
	if err := u.handshake(user, pass, vhost, maxFrame); err != nil {
		nc.Close()
		return nil, fmt.Errorf("%s: %w", peer.Addr, err)
	}
	nc.SetDeadline(time.Time{})
	go u.read()
	go u.watch()
	return u, nil
}

// dialPeer connects to peer's door, the TLS handshake included, within
// forwardTimeout.
func dialPeer(peer Peer) (net.Conn, error) {
	d := &net.Dialer{Timeout: forwardTimeout}
	if peer.TLS == nil {
		nc, err := d.Dial("tcp", peer.Addr)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", peer.Addr, err)
		}
		return nc, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), forwardTimeout)
	defer cancel()
	nc, err := (&tls.Dialer{NetDialer: d, Config: peer.TLS}).DialContext(ctx, "tcp", peer.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s over TLS: %w", peer.Addr, err)
	}
	return nc, nil
}

// dialLogInterval is how often a failed dial to one group's door is
// logged at most (each client is told every time).
const dialLogInterval = 10 * time.Second

// dialLog logs failed dials to other groups' doors, once per group per
// dialLogInterval.
type dialLog struct {
	mu   sync.Mutex
	last map[string]time.Time // by group
}

func (d *dialLog) warn(log *slog.Logger, p Peer, err error) {
	now := time.Now()
	d.mu.Lock()
	if d.last == nil || len(d.last) > upstreamMaxChannels {
		d.last = map[string]time.Time{}
	}
	quiet := now.Sub(d.last[p.Group]) < dialLogInterval
	if !quiet {
		d.last[p.Group] = now
	}
	d.mu.Unlock()
	if !quiet {
		log.Warn("amqp: forward: cannot reach another broker group's door", "group", p.Group, "addr", p.Addr,
			"tls", p.TLS != nil, "err", err)
	}
}

// watch closes the connection when a publish on it has waited longer
// than confirmTimeout for its confirm.
func (u *upstream) watch() {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-u.done:
			return
		case <-t.C:
		}
		u.mu.Lock()
		var stuck bool
		for _, c := range u.chans {
			if c.oldest == nil {
				continue
			}
			if at := c.oldest(); !at.IsZero() && time.Since(at) > confirmTimeout {
				stuck = true
				break
			}
		}
		if stuck && u.err == nil {
			u.err = fmt.Errorf("%s confirmed nothing for %v", u.peer.Group, confirmTimeout)
		}
		u.mu.Unlock()
		if stuck {
			u.nc.Close() // the reader ends and fails every channel
		}
	}
}

func (u *upstream) handshake(user, pass, vhost string, maxFrame uint32) error {
	if _, err := u.nc.Write(wire.ProtocolHeader); err != nil {
		return err
	}
	if _, err := u.expect(); err != nil { // connection.start
		return err
	}
	resp := append(append(append([]byte{0}, user...), 0), pass...)
	u.sendFrame(0, &wire.ConnectionStartOk{ClientProperties: wire.Table{"product": "Keel", peerProperty: true},
		Mechanism: "PLAIN", Response: resp, Locale: "en_US"})
	m, err := u.expect()
	if err != nil {
		return err
	}
	tune, ok := m.(*wire.ConnectionTune)
	if !ok {
		return fmt.Errorf("expected connection.tune, got %s", m.Name())
	}
	u.frameMax = min(tune.FrameMax, maxFrame)
	if u.frameMax == 0 {
		u.frameMax = maxFrame
	}
	u.sendFrame(0, &wire.ConnectionTuneOk{ChannelMax: min(tune.ChannelMax, upstreamMaxChannels), FrameMax: u.frameMax})
	u.sendFrame(0, &wire.ConnectionOpen{VirtualHost: vhost})
	m, err = u.expect()
	if err != nil {
		return err
	}
	if _, ok := m.(*wire.ConnectionOpenOk); !ok {
		return fmt.Errorf("expected connection.open-ok, got %s", m.Name())
	}
	return nil
}

// expect reads the next method on channel 0 during the handshake; a
// connection.close is returned as an error carrying its code and text.
func (u *upstream) expect() (wire.Method, error) {
	for {
		f, err := u.fr.ReadFrame(max(u.frameMax, wire.FrameMinSize))
		if err != nil {
			return nil, err
		}
		if f.Type == wire.FrameHeartbeat {
			continue
		}
		if f.Type != wire.FrameMethod || f.Channel != 0 {
			return nil, fmt.Errorf("frame type %d on channel %d during the handshake", f.Type, f.Channel)
		}
		m, err := wire.ReadMethod(f.Payload)
		if err != nil {
			return nil, err
		}
		if cl, ok := m.(*wire.ConnectionClose); ok {
			return nil, &remoteClose{code: cl.ReplyCode, text: cl.ReplyText}
		}
		return m, nil
	}
}

// remoteClose is a channel.close or connection.close the peer sent.
type remoteClose struct {
	code uint16
	text string
}

func (e *remoteClose) Error() string { return fmt.Sprintf("%d %s", e.code, e.text) }

func (u *upstream) sendFrame(ch uint16, m wire.Method) error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	u.wbuf = wire.AppendMethodFrame(u.wbuf[:0], ch, m)
	return u.writeLocked(u.wbuf)
}

func (u *upstream) sendContent(ch uint16, m wire.Method, props, body []byte) error {
	u.wmu.Lock()
	defer u.wmu.Unlock()
	u.wbuf = appendContent(u.wbuf[:0], u.frameMax, ch, m, props, body)
	err := u.writeLocked(u.wbuf)
	if cap(u.wbuf) > 1<<20 {
		u.wbuf = nil
	}
	return err
}

func (u *upstream) writeLocked(b []byte) error {
	u.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := u.nc.Write(b); err != nil {
		u.nc.Close() // the reader ends and fails every channel
		return fmt.Errorf("%w: %v", errUpstreamClosed, err)
	}
	return nil
}

// read runs until the connection ends, then fails every channel.
func (u *upstream) read() {
	err := u.readLoop()
	u.nc.Close()
	u.mu.Lock()
	if u.err == nil {
		u.err = err
	}
	err = u.err
	chans := u.chans
	u.chans = map[uint16]*upChan{}
	u.mu.Unlock()
	close(u.done)
	for _, c := range chans {
		c.endByPeer(fmt.Errorf("%w (%s): %v", errUpstreamClosed, u.peer.Group, err))
	}
}

func (u *upstream) readLoop() error {
	for {
		f, err := u.fr.ReadFrame(u.frameMax)
		if err != nil {
			return err
		}
		if f.Type == wire.FrameHeartbeat {
			continue
		}
		if f.Channel == 0 {
			m, err := wire.ReadMethod(f.Payload)
			if err != nil {
				return err
			}
			switch m := m.(type) {
			case *wire.ConnectionClose:
				u.sendFrame(0, &wire.ConnectionCloseOk{})
				return &remoteClose{code: m.ReplyCode, text: m.ReplyText}
			case *wire.ConnectionCloseOk: // of close
				return errUpstreamClosed
			}
			continue // connection.blocked/unblocked: the writes wait on TCP
		}
		u.mu.Lock()
		c := u.chans[f.Channel]
		u.mu.Unlock()
		if c == nil {
			continue // a channel being closed
		}
		if err := c.frame(f); err != nil {
			return err
		}
	}
}

// frame handles one frame of the channel (reader goroutine).
func (c *upChan) frame(f wire.Frame) error {
	switch f.Type {
	case wire.FrameMethod:
		m, err := wire.ReadMethod(f.Payload)
		if err != nil {
			return err
		}
		if m.HasContent() {
			c.cm, c.hdr, c.body = m, nil, nil
			return nil
		}
		c.method(m)
	case wire.FrameHeader:
		h, err := wire.ReadHeader(f.Payload)
		if err != nil {
			return err
		}
		if c.cm == nil {
			return errors.New("content header without a method")
		}
		c.hdr = &h
		c.body = make([]byte, 0, min(h.BodySize, 1<<20))
		if h.BodySize == 0 {
			c.content()
		}
	case wire.FrameBody:
		if c.hdr == nil {
			return errors.New("body frame without a content header")
		}
		if uint64(len(c.body)+len(f.Payload)) > c.hdr.BodySize {
			return errors.New("body longer than its header said")
		}
		c.body = append(c.body, f.Payload...)
		if uint64(len(c.body)) == c.hdr.BodySize {
			c.content()
		}
	}
	return nil
}

func (c *upChan) content() {
	m, props, body := c.cm, c.hdr.Raw, c.body
	c.cm, c.hdr, c.body = nil, nil, nil
	switch m := m.(type) {
	case *wire.BasicDeliver:
		if c.onDeliver != nil {
			c.onDeliver(m, props, body)
		}
	case *wire.BasicReturn:
		if c.onReturn != nil {
			c.onReturn(m, props, body)
		}
	default: // basic.get-ok
		c.reply(upReply{m: m, props: props, body: body})
	}
}

func (c *upChan) method(m wire.Method) {
	switch m := m.(type) {
	case *wire.BasicAck:
		if c.onConfirm != nil {
			c.onConfirm(m.DeliveryTag, m.Multiple, true)
		}
	case *wire.BasicNack:
		if c.onConfirm != nil {
			c.onConfirm(m.DeliveryTag, m.Multiple, false)
		}
	case *wire.BasicCancel: // the queue went away on its home
		if c.onCancel != nil {
			c.onCancel(m.ConsumerTag)
		}
	case *wire.ChannelClose:
		c.u.sendFrame(c.id, &wire.ChannelCloseOk{})
		c.u.forget(c)
		c.endByPeer(&remoteClose{code: m.ReplyCode, text: m.ReplyText})
	case *wire.ChannelCloseOk: // of close: the id is free again
		c.u.forget(c)
	case *wire.ChannelFlow:
		c.u.sendFrame(c.id, &wire.ChannelFlowOk{Active: m.Active})
	default:
		c.reply(upReply{m: m})
	}
}

// reply hands a synchronous reply to the waiting method (one at most).
func (c *upChan) reply(r upReply) {
	select {
	case c.replies <- r:
	default: // nobody asked: a protocol slip of the peer's, dropped
	}
}

// end marks the channel ended with err and fails the waiting method; it
// reports whether this was the first call.
func (c *upChan) end(err error) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.closed, c.closeErr = true, err
	close(c.gone)
	return true
}

// endByPeer is end for an end this side did not ask for: onEnd is told.
func (c *upChan) endByPeer(err error) {
	if c.end(err) && c.onEnd != nil {
		c.onEnd(err)
	}
}

// failed reports why the channel ended (nil: open).
func (c *upChan) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closeErr
}

func (u *upstream) forget(c *upChan) {
	u.mu.Lock()
	if u.chans[c.id] == c {
		delete(u.chans, c.id)
	}
	u.mu.Unlock()
}

// openChannel opens a channel; set sets its handlers before any frame of
// it can arrive.
func (u *upstream) openChannel(set func(*upChan)) (*upChan, error) {
	u.mu.Lock()
	if u.err != nil {
		u.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", errUpstreamClosed, u.err)
	}
	var id uint16
	for i := 0; i < upstreamMaxChannels; i++ {
		u.nextID = u.nextID%upstreamMaxChannels + 1
		if u.chans[u.nextID] == nil {
			id = u.nextID
			break
		}
	}
	if id == 0 {
		u.mu.Unlock()
		return nil, fmt.Errorf("amqp: forward: %d channels open to %s", upstreamMaxChannels, u.peer.Group)
	}
	c := &upChan{u: u, id: id, replies: make(chan upReply, 1), gone: make(chan struct{})}
	if set != nil {
		set(c)
	}
	u.chans[id] = c
	u.mu.Unlock()
	if _, err := c.call(&wire.ChannelOpen{}); err != nil {
		return nil, err
	}
	return c, nil
}

// call sends m and waits for its synchronous reply.
func (c *upChan) call(m wire.Method) (upReply, error) {
	if err := c.send(m); err != nil {
		return upReply{}, err
	}
	t := time.NewTimer(forwardTimeout)
	defer t.Stop()
	select {
	case r := <-c.replies:
		return r, nil
	case <-c.gone:
		return upReply{}, c.failed()
	case <-t.C:
		c.u.nc.Close() // the peer is stuck: end the connection, fail its channels
		return upReply{}, fmt.Errorf("%w: %s did not answer %s within %v", errUpstreamClosed, c.u.peer.Group, m.Name(), forwardTimeout)
	}
}

// send sends m without waiting (an ack, a publish's method is sendContent).
func (c *upChan) send(m wire.Method) error {
	if err := c.failed(); err != nil {
		return err
	}
	return c.u.sendFrame(c.id, m)
}

// publish sends a message.
func (c *upChan) publish(m *wire.BasicPublish, props, body []byte) error {
	if err := c.failed(); err != nil {
		return err
	}
	return c.u.sendContent(c.id, m, props, body)
}

// close closes the channel (its home requeues what it delivered on it
// unacknowledged); it does not wait for close-ok.
func (c *upChan) close() {
	if c.failed() != nil {
		return
	}
	c.u.sendFrame(c.id, &wire.ChannelClose{ReplyCode: wire.ReplySuccess, ReplyText: "closed"})
	c.end(errUpstreamClosed)
	// The id stays taken until the close-ok arrives (method).
}

// closeWait bounds how long close waits for the home's close-ok.
const closeWait = 2 * time.Second

// close ends the connection: its home requeues every delivery not
// acknowledged on it, as for any client that goes away. It waits for the
// home's close-ok (up to closeWait) before closing the socket: closing it
// with the home's deliveries unread would reset the connection, and the
// home could lose the acknowledgements sent just before.
func (u *upstream) close() {
	u.sendFrame(0, &wire.ConnectionClose{ReplyCode: wire.ReplySuccess, ReplyText: "closed"})
	t := time.NewTimer(closeWait)
	defer t.Stop()
	select {
	case <-u.done:
	case <-t.C:
	}
	u.nc.Close()
	<-u.done
}
