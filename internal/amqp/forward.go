package amqp

// One AMQP namespace over a cluster of broker groups (docs/amqp.md, "A
// cluster of broker groups"). A queue lives in one group, its home: the
// group whose master first declared it. A client connected to any
// master's door uses every queue of the cluster: what concerns a queue
// homed on another group is forwarded to that group's door, over a
// connection this door opens as the client, with the client's own
// credentials and vhost (forward_client.go), so that the home checks the
// permissions and treats the client as if it were connected there:
//
//	queue.declare (a name not declared here): asked of the other groups
//	  first (passive declare); the home answers, with its argument
//	  equivalence checks; unknown everywhere: the name is claimed from
//	  its arbiter (claim.go), declared here if it names this group, else
//	  forwarded to the group it names
//	queue.purge, queue.delete, basic.consume, basic.get, basic.cancel
//	basic.ack, basic.nack, basic.reject of a forwarded delivery (one
//	  per delivery tag upstream)
//	basic.publish to a queue homed elsewhere (forward_publish.go):
//	  confirmed to the client once the home confirmed
//	tx.commit of a transaction that touched queues homed elsewhere:
//	  each group's part committed on it, then the local one (tx.go)
//
// Per client channel there is one upstream channel per group it touched
// (put in confirm mode by its first publish, or in tx mode by the first
// commit of a transactional channel that touched the group: tx.go), per
// client connection one upstream connection per group; when the client's channel or connection ends they end too, and
// the home requeues what it delivered unacknowledged.
//
// The home of a queue is found by asking the other groups' doors
// (Config.Cluster names them: the NameServer's GET_AMQP_CLUSTER), not
// read from a registry: the truth stays with the group that stores the
// queue (forward_home.go). Consuming: forward_consume.go; publishing:
// forward_publish.go; bindings: forward_bind.go.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// peerProperty is the client property a door's upstream connection
// carries: the door it reaches serves it from its own queues only, so a
// look-up never goes round the cluster.
const peerProperty = "x-keel-forwarded"

// Cluster is the door's view of the other broker groups of its cluster.
type Cluster interface {
	// Peers returns the AMQP doors of the other groups' masters.
	Peers(ctx context.Context) ([]Peer, error)
}

// Peer is another group's master door.
type Peer struct {
	Group string // brokerName
	Addr  string // host:port of its AMQP door ("": no master registered now)
	// TLS, if set, is the client configuration its door (an amqps one) is
	// dialled with; nil: plain TCP.
	TLS *tls.Config
	// Unreachable, if set, says why this member cannot reach the door
	// (its queues then fail as on a group that is down).
	Unreachable string
}

// String names the peer in what clients are told.
func (p Peer) String() string {
	switch {
	case p.Unreachable != "":
		return "broker group " + p.Group + ", " + p.Unreachable
	case p.Addr == "":
		return "broker group " + p.Group + ", no master registered"
	}
	return "broker group " + p.Group + ", " + p.Addr
}

// connForward is a client connection's upstream connections.
type connForward struct {
	mu  sync.Mutex
	ups map[string]*upstream // by group
}

// upstream returns the connection's upstream connection to p, dialled
// on first use (and again after it ended).
func (c *conn) upstream(p Peer) (*upstream, error) {
	if p.Unreachable != "" {
		return nil, errors.New(p.Unreachable)
	}
	if p.Addr == "" {
		return nil, fmt.Errorf("no master of broker group %s is registered with the NameServers", p.Group)
	}
	f := &c.fwd
	f.mu.Lock()
	u := f.ups[p.Group]
	f.mu.Unlock()
	if u != nil {
		select {
		case <-u.done:
		default:
			if u.peer.Addr == p.Addr {
				return u, nil
			}
			u.close() // the group's master moved
		}
	}
	u, err := dialUpstream(p, c.user, c.secret, c.vh.name, c.srv.cfg.MaxFrameBytes)
	if err != nil {
		c.srv.dialFailures.warn(c.srv.log, p, err)
		return nil, err
	}
	f.mu.Lock()
	if f.ups == nil {
		f.ups = map[string]*upstream{}
	}
	f.ups[p.Group] = u
	f.mu.Unlock()
	select {
	case <-c.done: // the client left while this dialled
		c.closeUpstreams()
	default:
	}
	return u, nil
}

// updateUpstreams passes a connection.update-secret on to the
// connection's upstream connections, so that each home applies the
// account as it is now (a home that refuses the secret closes its
// connection, which fails what went through it). The home's
// update-secret-ok is not waited for.
func (c *conn) updateUpstreams(m *wire.ConnectionUpdateSecret) {
	f := &c.fwd
	f.mu.Lock()
	ups := make([]*upstream, 0, len(f.ups))
	for _, u := range f.ups {
		ups = append(ups, u)
	}
	f.mu.Unlock()
	for _, u := range ups {
		u.sendFrame(0, &wire.ConnectionUpdateSecret{NewSecret: m.NewSecret, Reason: m.Reason})
	}
}

// closeUpstreams ends the connection's upstream connections (at its
// end): their homes requeue what they delivered unacknowledged.
func (c *conn) closeUpstreams() {
	f := &c.fwd
	f.mu.Lock()
	ups := f.ups
	f.ups = nil
	f.mu.Unlock()
	var wg sync.WaitGroup // each waits for its home's close-ok: together
	for _, u := range ups {
		wg.Add(1)
		go func() { defer wg.Done(); u.close() }()
	}
	wg.Wait()
}

// fwdChan is a client channel's upstream channel to one group.
type fwdChan struct {
	ch   *channel
	peer Peer
	uc   *upChan
	qos  int // the prefetch last set upstream
	// mode is the upstream channel's mode: modeNone until a publish puts
	// it in confirm mode or a transaction's commit in tx mode (the two
	// exclude each other there as here). Reader only.
	mode int

	// Publishes sent and not confirmed (forward_publish.go).
	mu      sync.Mutex
	seq     uint64
	pending []*fwdPart
	// txSent are the messages of the transaction part being committed
	// on it (tx.go), for the home's basic.return.
	txSent []*txSent

	// Guarded by ch.mu: its consumers (tag: no-ack) and whether it was
	// dropped from the channel.
	consumers map[string]*fwdConsumer
}

// fwdConsumer is a consumer forwarded to its queue's home.
type fwdConsumer struct {
	noAck bool
	ready bool          // consume-ok was sent to the client
	held  []heldDeliver // deliveries that came before it
}

type heldDeliver struct {
	m           *wire.BasicDeliver
	props, body []byte
}

// Modes of an upstream channel.
const (
	modeNone = iota
	modeConfirm
	modeTx
)

// setMode puts the upstream channel in confirm or tx mode (once; a
// channel in the other mode is an error). Reader only.
func (fc *fwdChan) setMode(mode int) error {
	if fc.mode == mode {
		return nil
	}
	if fc.mode != modeNone {
		return fmt.Errorf("the channel to broker group %s is already in %s mode", fc.peer.Group, modeNames[fc.mode])
	}
	var m wire.Method = &wire.ConfirmSelect{}
	if mode == modeTx {
		m = &wire.TxSelect{}
	}
	if _, err := fc.uc.call(m); err != nil {
		return err
	}
	fc.mode = mode
	return nil
}

var modeNames = [...]string{modeNone: "no", modeConfirm: "confirm", modeTx: "tx"}

// remoteTag is the upstream side of a delivery tag the client holds.
type remoteTag struct {
	fc  *fwdChan
	tag uint64
}

// chanForward is a client channel's forwarding state, guarded by ch.mu
// (chans is changed on the reader only).
type chanForward struct {
	chans map[string]*fwdChan // by group
	tags  map[uint64]remoteTag
	cons  map[string]*fwdChan // consumer tag -> its upstream channel
	// joins (confirmer only): publishes waiting for their parts
	// (forward_publish.go), by join id.
	joins  map[uint64]*fwdJoin
	joinID uint64 // reader only: ids of joins outside confirm mode
}

// fwdChan returns the channel's upstream channel to p (opened on first
// use, in no mode: setMode). Reader only (which alone changes ch.fwd.chans,
// under ch.mu, so it reads it without).
func (ch *channel) fwdChan(p Peer) (*fwdChan, error) {
	if fc := ch.fwd.chans[p.Group]; fc != nil {
		if fc.uc.failed() == nil && fc.peer == p {
			return fc, nil
		}
		ch.dropFwdChan(fc)
	}
	u, err := ch.c.upstream(p)
	if err != nil {
		return nil, err
	}
	fc := &fwdChan{ch: ch, peer: p, consumers: map[string]*fwdConsumer{}}
	uc, err := u.openChannel(func(uc *upChan) {
		uc.onDeliver = fc.deliver
		uc.onConfirm = fc.confirm
		uc.onReturn = fc.returned
		uc.onCancel = fc.cancelled
		uc.onEnd = fc.ended
		uc.oldest = fc.oldest
	})
	if err != nil {
		return nil, err
	}
	fc.uc = uc
	ch.mu.Lock()
	if ch.fwd.chans == nil {
		ch.fwd.chans = map[string]*fwdChan{}
	}
	ch.fwd.chans[p.Group] = fc
	ch.mu.Unlock()
	return fc, nil
}

// dropFwdChan forgets an ended upstream channel. Reader only.
func (ch *channel) dropFwdChan(fc *fwdChan) {
	ch.mu.Lock()
	if ch.fwd.chans[fc.peer.Group] == fc {
		delete(ch.fwd.chans, fc.peer.Group)
	}
	ch.mu.Unlock()
	fc.uc.close()
}

// closeForwards closes the channel's upstream channels (the channel is
// shutting down): their homes requeue what they delivered unacknowledged.
// ch.mu is not held.
func (ch *channel) closeForwards() {
	ch.mu.Lock()
	fcs := make([]*fwdChan, 0, len(ch.fwd.chans))
	for _, fc := range ch.fwd.chans {
		fcs = append(fcs, fc)
	}
	clear(ch.fwd.tags)
	clear(ch.fwd.cons)
	ch.mu.Unlock()
	for _, fc := range fcs {
		fc.uc.close()
		fc.failPending()
	}
}

// forward runs m if it concerns a queue homed on another group (done
// true), else leaves it to the local path (done false). Reader only.
func (ch *channel) forward(m wire.Method) (done bool, err error) {
	if !ch.c.forwards() {
		return false, nil
	}
	switch m := m.(type) {
	case *wire.QueueDeclare:
		return ch.forwardDeclare(m)
	case *wire.QueuePurge:
		p, ok, err := ch.remoteHome(m, m.Queue)
		if !ok || err != nil {
			return ok, err
		}
		return true, ch.forwardCall(m, p, m.Queue, &wire.QueuePurge{Queue: m.Queue}, m.NoWait)
	case *wire.QueueDelete:
		p, ok, err := ch.remoteHome(m, m.Queue)
		if !ok || err != nil {
			return ok, err
		}
		defer ch.c.srv.homes.forget(homeKey(ch.c.vh.name, m.Queue))
		return true, ch.forwardCall(m, p, m.Queue, &wire.QueueDelete{Queue: m.Queue, IfUnused: m.IfUnused, IfEmpty: m.IfEmpty}, m.NoWait)
	case *wire.BasicConsume:
		p, ok, err := ch.remoteHome(m, m.Queue)
		if !ok && err == nil && m.ConsumerTag != "" {
			ch.mu.Lock()
			_, dup := ch.fwd.cons[m.ConsumerTag]
			ch.mu.Unlock()
			if dup { // a local consumer may not take a forwarded one's tag
				return true, hard(wire.NotAllowed, m, "attempt to reuse consumer tag '%s'", m.ConsumerTag)
			}
		}
		if !ok || err != nil {
			return ok, err
		}
		return true, ch.forwardConsume(m, p)
	case *wire.BasicGet:
		p, ok, err := ch.remoteHome(m, m.Queue)
		if !ok || err != nil {
			return ok, err
		}
		return true, ch.forwardGet(m, p)
	case *wire.QueueBind:
		return ch.forwardBind(m, m.Exchange, m.Queue, m.RoutingKey, m.Arguments, false, m.NoWait)
	case *wire.QueueUnbind:
		return ch.forwardBind(m, m.Exchange, m.Queue, m.RoutingKey, m.Arguments, true, false)
	case *wire.BasicCancel:
		return ch.forwardCancel(m)
	case *wire.BasicAck:
		return ch.forwardSettle(m, m.DeliveryTag, m.Multiple, func(t uint64) wire.Method { return &wire.BasicAck{DeliveryTag: t} })
	case *wire.BasicNack:
		return ch.forwardSettle(m, m.DeliveryTag, m.Multiple, func(t uint64) wire.Method {
			return &wire.BasicNack{DeliveryTag: t, Requeue: m.Requeue}
		})
	case *wire.BasicReject:
		return ch.forwardSettle(m, m.DeliveryTag, false, func(t uint64) wire.Method {
			return &wire.BasicReject{DeliveryTag: t, Requeue: m.Requeue}
		})
	case *wire.BasicRecover:
		for _, fc := range ch.fwd.chans {
			fc.uc.call(&wire.BasicRecover{Requeue: true})
		}
	}
	return false, nil
}

// forwards reports whether the connection's methods may be forwarded.
func (c *conn) forwards() bool { return c.srv.cfg.Cluster != nil && !c.fromPeer }

// remoteHome resolves name ("": the channel's last queue) for m: ok
// true with the home if another group holds it and this one does not.
// An error (a channel exception for the client) if that cannot be told.
func (ch *channel) remoteHome(m wire.Method, name string) (Peer, bool, error) {
	if name == "" {
		name = ch.lastQueue
	}
	if name == "" || ch.c.vh.queue(name) != nil {
		return Peer{}, false, nil
	}
	p, ok, err := ch.c.lookupHome(name)
	if err != nil {
		return Peer{}, true, soft(wire.NotFound, m, "home of queue '%s' in vhost '%s' unknown: %v", name, ch.c.vh.name, err)
	}
	return p, ok, nil
}

// upstreamError is what the client is told of a forwarded method that
// failed: the home's own channel exception as it sent it, or 404 naming
// the group that could not be reached.
func (ch *channel) upstreamError(m wire.Method, p Peer, queue string, err error) error {
	var rc *remoteClose
	if errors.As(err, &rc) {
		if rc.code == wire.NotFound {
			ch.c.srv.homes.forget(homeKey(ch.c.vh.name, queue))
		}
		text := rc.text
		if name := codeNames[rc.code]; name != "" {
			text = strings.TrimPrefix(text, name+" - ")
		}
		if rc.code >= 500 { // the home ended the whole connection
			return soft(wire.NotFound, m, "home of queue '%s' (broker group %s) closed the connection: %s", queue, p.Group, rc.Error())
		}
		return soft(rc.code, m, "%s", text)
	}
	return soft(wire.NotFound, m, "home node of queue '%s' in vhost '%s' (%s) is down or inaccessible: %v",
		queue, ch.c.vh.name, p, err)
}

func (ch *channel) forwardDeclare(m *wire.QueueDeclare) (bool, error) {
	name := m.Queue
	if name == "" && m.Passive {
		name = ch.lastQueue
	}
	if name == "" || m.Exclusive || strings.HasPrefix(name, "amq.") || ch.c.vh.queue(name) != nil {
		return false, nil
	}
	lookupAt := time.Now().Add(-negativeHomeTTL) // a cached answer is at most that old
	p, ok, err := ch.c.lookupHome(name)
	if err != nil {
		// A group that may hold it did not answer: declaring it here
		// could give the queue two homes.
		return true, soft(wire.NotFound, m, "cannot tell where queue '%s' in vhost '%s' lives: %v", name, ch.c.vh.name, err)
	}
	if !ok {
		ch.lookupAt = lookupAt // no group has it: claimed by the local path (claim.go)
		return false, nil
	}
	return true, ch.forwardDeclareTo(m, p, name)
}

// forwardDeclareTo forwards a queue.declare of name to p's door and
// answers the client with its reply.
func (ch *channel) forwardDeclareTo(m *wire.QueueDeclare, p Peer, name string) error {
	fc, err := ch.fwdChan(p)
	if err != nil {
		return ch.upstreamError(m, p, name, err)
	}
	up := *m
	up.Queue, up.NoWait = name, false
	r, err := fc.uc.call(&up)
	if err != nil {
		return ch.upstreamError(m, p, name, err)
	}
	ok2, isOk := r.m.(*wire.QueueDeclareOk)
	if !isOk {
		return ch.upstreamError(m, p, name, fmt.Errorf("answered %s", r.m.Name()))
	}
	// The queue is there now (a "nowhere" cached before the declare would
	// drop this client's next publishes).
	ch.c.srv.homes.put(homeKey(ch.c.vh.name, name), homeEntry{group: p.Group})
	ch.lastQueue = name
	if m.NoWait {
		return nil
	}
	return ch.c.send(ch.id, ok2)
}

// forwardCall sends up (purge, delete) to p and answers the client with
// the home's reply.
func (ch *channel) forwardCall(m wire.Method, p Peer, queue string, up wire.Method, noWait bool) error {
	if queue == "" {
		queue = ch.lastQueue
	}
	switch u := up.(type) {
	case *wire.QueuePurge:
		u.Queue = queue
	case *wire.QueueDelete:
		u.Queue = queue
	}
	fc, err := ch.fwdChan(p)
	if err != nil {
		return ch.upstreamError(m, p, queue, err)
	}
	r, err := fc.uc.call(up)
	if err != nil {
		return ch.upstreamError(m, p, queue, err)
	}
	if noWait {
		return nil
	}
	return ch.c.send(ch.id, r.m)
}

// ended: the upstream channel ended without this side closing it (the
// home closed it, or the connection to the home ended). What it had not
// confirmed is nacked; a channel consuming through it is closed, as its
// deliveries are requeued by the home.
func (fc *fwdChan) ended(err error) {
	fc.failPending()
	ch := fc.ch
	ch.mu.Lock()
	consuming := len(fc.consumers) > 0
	holds := false
	for _, r := range ch.fwd.tags {
		if r.fc == fc {
			holds = true
			break
		}
	}
	ch.mu.Unlock()
	if !consuming && !holds {
		return
	}
	var rc *remoteClose
	if errors.As(err, &rc) && rc.code < 500 {
		text := strings.TrimPrefix(rc.text, codeNames[rc.code]+" - ")
		ch.timeOut(soft(rc.code, nil, "broker group %s: %s", fc.peer.Group, text))
		return
	}
	ch.timeOut(soft(wire.NotFound, nil, "home node (%s) of a queue consumed on this channel is down or inaccessible: %v",
		fc.peer, err))
}
