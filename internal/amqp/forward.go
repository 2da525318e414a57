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
//	  equivalence checks; unknown everywhere: declared here, home here
//	queue.purge, queue.delete, basic.consume, basic.get, basic.cancel
//	basic.ack, basic.nack, basic.reject of a forwarded delivery (one
//	  per delivery tag upstream)
//	basic.publish to a queue homed elsewhere (forward_publish.go):
//	  confirmed to the client once the home confirmed
//
// Per client channel there is one upstream channel per group it touched
// (in confirm mode), per client connection one upstream connection per
// group; when the client's channel or connection ends they end too, and
// the home requeues what it delivered unacknowledged.
//
// The home of a queue is found by asking the other groups' doors
// (Config.Cluster names them: the NameServer's GET_AMQP_CLUSTER), not
// read from a registry: the truth stays with the group that stores the
// queue. Answers are cached: a home until an answer shows it wrong (the
// queue gone there), "nowhere" for negativeHomeTTL.

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// Cache lifetimes of the home look-ups.
const (
	// peersTTL is how long the list of peers is used before it is asked
	// again.
	peersTTL = 5 * time.Second
	// negativeHomeTTL is how long "no group has this queue" is believed:
	// a queue declared on another group meanwhile is found at most this
	// late by a publish here.
	negativeHomeTTL = time.Second
	// maxHomeEntries bounds the cached look-ups per server; past it the
	// cache is emptied (it only saves round trips).
	maxHomeEntries = 1 << 16
)

// homes is the server's cache of queue homes.
type homes struct {
	mu      sync.Mutex
	peers   []Peer
	peersAt time.Time
	// seen are the groups Cluster ever named since the start: one missing
	// from its answer now (its master down) may hold any name.
	seen   map[string]bool
	byName map[string]homeEntry // vhost + "\x00" + queue
}

type homeEntry struct {
	group string // "": on no group
	until time.Time
}

func homeKey(vhost, queue string) string { return vhost + "\x00" + queue }

func (h *homes) get(key string, now time.Time) (homeEntry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.byName[key]
	if ok && e.group == "" && now.After(e.until) {
		delete(h.byName, key)
		return homeEntry{}, false
	}
	return e, ok
}

func (h *homes) put(key string, e homeEntry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byName == nil || len(h.byName) >= maxHomeEntries {
		h.byName = map[string]homeEntry{}
	}
	h.byName[key] = e
}

func (h *homes) forget(key string) {
	h.mu.Lock()
	delete(h.byName, key)
	h.mu.Unlock()
}

// clusterPeers returns the other groups' doors (cached for peersTTL)
// and the groups seen before that are missing from them now. When they
// cannot be asked, the last answer stands.
func (s *Server) clusterPeers() (peers []Peer, missing []string, err error) {
	h := &s.homes
	h.mu.Lock()
	known := h.peers != nil
	fresh := known && time.Since(h.peersAt) < peersTTL
	h.mu.Unlock()
	if !fresh {
		if err := s.refreshPeers(); err != nil {
			if !known {
				return nil, nil, err
			}
			s.log.Warn("amqp: cannot refresh the cluster's AMQP doors; the last list stands", "err", err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for g := range h.seen {
		if !slices.ContainsFunc(h.peers, func(p Peer) bool { return p.Group == g }) {
			missing = append(missing, g)
		}
	}
	slices.Sort(missing)
	return h.peers, missing, nil
}

// refreshPeers asks Config.Cluster for the peers; on an error the list
// is kept, and asked again after peersTTL.
func (s *Server) refreshPeers() error {
	ctx, cancel := context.WithTimeout(s.baseCtx, forwardTimeout)
	defer cancel()
	ps, err := s.cfg.Cluster.Peers(ctx)
	h := &s.homes
	h.mu.Lock()
	defer h.mu.Unlock()
	h.peersAt = time.Now()
	if err != nil {
		return err
	}
	if ps == nil {
		ps = []Peer{}
	}
	h.peers = ps
	if h.seen == nil {
		h.seen = map[string]bool{}
	}
	for _, p := range ps {
		h.seen[p.Group] = true
	}
	return nil
}

// errHomeUnknown: a group that might hold the queue did not answer.
var errHomeUnknown = errors.New("amqp: forward: home unknown")

// lookupHome finds the group holding queue name (found false: none
// does). An error means some group could not be asked: the queue may
// be there.
func (c *conn) lookupHome(name string) (Peer, bool, error) {
	key := homeKey(c.vh.name, name)
	peers, missing, err := c.srv.clusterPeers()
	if err != nil {
		return Peer{}, false, fmt.Errorf("%w: the cluster's members: %v", errHomeUnknown, err)
	}
	if e, ok := c.srv.homes.get(key, time.Now()); ok {
		if e.group == "" {
			return Peer{}, false, nil
		}
		// The group's door as registered now (its master may have moved).
		if i := slices.IndexFunc(peers, func(p Peer) bool { return p.Group == e.group }); i >= 0 {
			return peers[i], true, nil
		}
		return Peer{Group: e.group}, true, nil // not registered now: fails as down
	}
	var down []string
	for _, g := range missing {
		down = append(down, g+" (no master registered)")
	}
	for _, p := range peers {
		has, err := c.askHas(p, name)
		if err != nil {
			down = append(down, fmt.Sprintf("%s (%v)", p.Group, err))
			continue
		}
		if has {
			c.srv.homes.put(key, homeEntry{group: p.Group})
			return p, true, nil
		}
	}
	if len(down) > 0 {
		return Peer{}, false, fmt.Errorf("%w: broker group %s down or inaccessible", errHomeUnknown, strings.Join(down, ", "))
	}
	c.srv.homes.put(key, homeEntry{until: time.Now().Add(negativeHomeTTL)})
	return Peer{}, false, nil
}

// askHas asks p whether it holds queue name: a passive declare on a
// channel of its own.
func (c *conn) askHas(p Peer, name string) (bool, error) {
	u, err := c.upstream(p)
	if err != nil {
		return false, err
	}
	uc, err := u.openChannel(nil)
	if err != nil {
		return false, err
	}
	r, err := uc.call(&wire.QueueDeclare{Queue: name, Passive: true})
	var rc *remoteClose
	switch {
	case err == nil:
		uc.close()
		if _, ok := r.m.(*wire.QueueDeclareOk); !ok {
			return false, fmt.Errorf("answered %s to queue.declare", r.m.Name())
		}
		return true, nil
	case errors.As(err, &rc) && rc.code == wire.NotFound:
		return false, nil
	case errors.As(err, &rc) && rc.code == wire.ResourceLocked:
		return true, nil // another connection's exclusive queue there
	}
	return false, err
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

// closeUpstreams ends the connection's upstream connections (at its
// end): their homes requeue what they delivered unacknowledged.
func (c *conn) closeUpstreams() {
	f := &c.fwd
	f.mu.Lock()
	ups := f.ups
	f.ups = nil
	f.mu.Unlock()
	for _, u := range ups {
		u.close()
	}
}

// fwdChan is a client channel's upstream channel to one group.
type fwdChan struct {
	ch   *channel
	peer Peer
	uc   *upChan
	qos  int // the prefetch last set upstream

	// Publishes sent and not confirmed (forward_publish.go).
	mu      sync.Mutex
	seq     uint64
	pending []*fwdPart

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
// use, in confirm mode). Reader only (which alone changes ch.fwd.chans,
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
	if _, err := uc.call(&wire.ConfirmSelect{}); err != nil {
		uc.close()
		return nil, err
	}
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
	if ok && ch.tx {
		return Peer{}, true, soft(wire.NotImplemented, m, "queue '%s' is stored by broker group %s: transactions over another group's queue are not supported", name, p.Group)
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
	p, ok, err := ch.c.lookupHome(name)
	if err != nil {
		// A group that may hold it did not answer: declaring it here
		// could give the queue two homes.
		return true, soft(wire.NotFound, m, "cannot tell where queue '%s' in vhost '%s' lives: %v", name, ch.c.vh.name, err)
	}
	if !ok {
		return false, nil // home here
	}
	fc, err := ch.fwdChan(p)
	if err != nil {
		return true, ch.upstreamError(m, p, name, err)
	}
	up := *m
	up.Queue, up.NoWait = name, false
	r, err := fc.uc.call(&up)
	if err != nil {
		return true, ch.upstreamError(m, p, name, err)
	}
	ok2, isOk := r.m.(*wire.QueueDeclareOk)
	if !isOk {
		return true, ch.upstreamError(m, p, name, fmt.Errorf("answered %s", r.m.Name()))
	}
	ch.lastQueue = name
	if m.NoWait {
		return true, nil
	}
	return true, ch.c.send(ch.id, ok2)
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

// prefetchFor is the prefetch a forwarded consumer gets upstream: the
// channel's per-consumer prefetch, or its global one if lower (the home
// applies it to this consumer alone).
func (ch *channel) prefetchFor() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	p := ch.prefetch
	if g := ch.globalPrefetch; g > 0 && (p == 0 || g < p) {
		p = g
	}
	return p
}

func (ch *channel) forwardConsume(m *wire.BasicConsume, p Peer) error {
	queue := m.Queue
	if queue == "" {
		queue = ch.lastQueue
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = "amq.ctag-" + newTopic()[6:]
	}
	ch.mu.Lock()
	_, dupLocal := ch.consumers[tag]
	_, dupRemote := ch.fwd.cons[tag]
	ch.mu.Unlock()
	if dupLocal || dupRemote {
		return hard(wire.NotAllowed, m, "attempt to reuse consumer tag '%s'", tag)
	}
	fc, err := ch.fwdChan(p)
	if err != nil {
		return ch.upstreamError(m, p, queue, err)
	}
	if pf := ch.prefetchFor(); pf != fc.qos {
		if _, err := fc.uc.call(&wire.BasicQos{PrefetchCount: uint16(pf)}); err != nil {
			return ch.upstreamError(m, p, queue, err)
		}
		fc.qos = pf
	}
	fcons := &fwdConsumer{noAck: m.NoAck}
	ch.mu.Lock()
	fc.consumers[tag] = fcons
	if ch.fwd.cons == nil {
		ch.fwd.cons = map[string]*fwdChan{}
	}
	ch.fwd.cons[tag] = fc
	ch.mu.Unlock()
	_, err = fc.uc.call(&wire.BasicConsume{Queue: queue, ConsumerTag: tag, NoAck: m.NoAck, Exclusive: m.Exclusive, Arguments: m.Arguments})
	if err != nil {
		ch.mu.Lock()
		delete(fc.consumers, tag)
		delete(ch.fwd.cons, tag)
		ch.mu.Unlock()
		return ch.upstreamError(m, p, queue, err)
	}
	if !m.NoWait {
		if err := ch.c.send(ch.id, &wire.BasicConsumeOk{ConsumerTag: tag}); err != nil {
			return err
		}
	}
	// What came before consume-ok goes out now, in order; then the
	// upstream reader sends the rest itself.
	for {
		ch.mu.Lock()
		held := fcons.held
		fcons.held = nil
		if len(held) == 0 {
			fcons.ready = true
			ch.mu.Unlock()
			return nil
		}
		ch.mu.Unlock()
		for _, d := range held {
			fc.send(tag, fcons, d.m, d.props, d.body)
		}
	}
}

// deliver is a delivery from the home (upstream reader).
func (fc *fwdChan) deliver(m *wire.BasicDeliver, props, body []byte) {
	ch := fc.ch
	ch.mu.Lock()
	fcons := fc.consumers[m.ConsumerTag]
	if ch.closing || fcons == nil {
		ch.mu.Unlock()
		return // the channel is closing: its upstream channel's close requeues it
	}
	if !fcons.ready {
		fcons.held = append(fcons.held, heldDeliver{m: m, props: props, body: body})
		ch.mu.Unlock()
		return
	}
	ch.mu.Unlock()
	fc.send(m.ConsumerTag, fcons, m, props, body)
}

// send hands a delivery from the home to the client under a delivery tag
// of the client's channel.
func (fc *fwdChan) send(ctag string, fcons *fwdConsumer, m *wire.BasicDeliver, props, body []byte) {
	ch := fc.ch
	ch.mu.Lock()
	if ch.closing {
		ch.mu.Unlock()
		return
	}
	ch.nextTag++
	tag := ch.nextTag
	if !fcons.noAck {
		if ch.fwd.tags == nil {
			ch.fwd.tags = map[uint64]remoteTag{}
		}
		ch.fwd.tags[tag] = remoteTag{fc: fc, tag: m.DeliveryTag}
	}
	ch.mu.Unlock()
	ch.c.sendContent(ch.id, &wire.BasicDeliver{ConsumerTag: ctag, DeliveryTag: tag, Redelivered: m.Redelivered,
		Exchange: m.Exchange, RoutingKey: m.RoutingKey}, props, body)
}

func (ch *channel) forwardGet(m *wire.BasicGet, p Peer) error {
	queue := m.Queue
	if queue == "" {
		queue = ch.lastQueue
	}
	fc, err := ch.fwdChan(p)
	if err != nil {
		return ch.upstreamError(m, p, queue, err)
	}
	r, err := fc.uc.call(&wire.BasicGet{Queue: queue, NoAck: m.NoAck})
	if err != nil {
		return ch.upstreamError(m, p, queue, err)
	}
	ok, isOk := r.m.(*wire.BasicGetOk)
	if !isOk {
		return ch.c.send(ch.id, r.m) // basic.get-empty
	}
	ch.mu.Lock()
	ch.nextTag++
	tag := ch.nextTag
	if !m.NoAck {
		if ch.fwd.tags == nil {
			ch.fwd.tags = map[uint64]remoteTag{}
		}
		ch.fwd.tags[tag] = remoteTag{fc: fc, tag: ok.DeliveryTag}
	}
	ch.mu.Unlock()
	return ch.c.sendContent(ch.id, &wire.BasicGetOk{DeliveryTag: tag, Redelivered: ok.Redelivered, Exchange: ok.Exchange,
		RoutingKey: ok.RoutingKey, MessageCount: ok.MessageCount}, r.props, r.body)
}

func (ch *channel) forwardCancel(m *wire.BasicCancel) (bool, error) {
	ch.mu.Lock()
	fc := ch.fwd.cons[m.ConsumerTag]
	delete(ch.fwd.cons, m.ConsumerTag)
	if fc != nil {
		delete(fc.consumers, m.ConsumerTag)
	}
	ch.mu.Unlock()
	if fc == nil {
		return false, nil
	}
	if _, err := fc.uc.call(&wire.BasicCancel{ConsumerTag: m.ConsumerTag}); err != nil && !errors.Is(err, errUpstreamClosed) {
		return true, ch.upstreamError(m, fc.peer, "", err)
	}
	if m.NoWait {
		return true, nil
	}
	return true, ch.c.send(ch.id, &wire.BasicCancelOk{ConsumerTag: m.ConsumerTag})
}

// cancelled: the home cancelled a consumer (its queue was deleted).
func (fc *fwdChan) cancelled(tag string) {
	ch := fc.ch
	ch.mu.Lock()
	_, ok := fc.consumers[tag]
	delete(fc.consumers, tag)
	if ch.fwd.cons[tag] == fc {
		delete(ch.fwd.cons, tag)
	}
	closing := ch.closing
	ch.mu.Unlock()
	if ok && !closing {
		ch.c.send(ch.id, &wire.BasicCancel{ConsumerTag: tag, NoWait: true})
	}
}

// forwardSettle forwards the settlement of the client's delivery tags
// that came from another group (each tag on its own upstream: one ack
// with multiple=true there could cover a delivery the client has not
// settled). A multiple settlement that also covers local deliveries goes
// on to the local path too.
func (ch *channel) forwardSettle(m wire.Method, tag uint64, multiple bool, up func(uint64) wire.Method) (bool, error) {
	ch.mu.Lock()
	if len(ch.fwd.tags) == 0 {
		ch.mu.Unlock()
		return false, nil
	}
	var rs []remoteTag
	if multiple {
		for t, r := range ch.fwd.tags {
			if tag == 0 || t <= tag {
				rs = append(rs, r)
				delete(ch.fwd.tags, t)
			}
		}
	} else if r, ok := ch.fwd.tags[tag]; ok {
		rs = append(rs, r)
		delete(ch.fwd.tags, tag)
	}
	local := false
	if multiple {
		for t := range ch.unacked {
			if tag == 0 || t <= tag {
				local = true
				break
			}
		}
	}
	ch.mu.Unlock()
	if len(rs) == 0 {
		return false, nil
	}
	if ch.tx {
		return true, soft(wire.NotImplemented, m, "transactions over another group's queue are not supported")
	}
	for _, r := range rs {
		// A failed upstream channel requeued the delivery already there.
		r.fc.uc.send(up(r.tag))
	}
	return !local, nil
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
