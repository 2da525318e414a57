package amqp

// Publishing to queues homed on other groups (forward.go). A message
// routed to such a queue is published to it on its home, through the
// default exchange with the queue's name as routing key and
// mandatory=true, on the channel's upstream channel to that group (put
// in confirm mode). On a transactional channel it is held for the
// commit instead (tx.go). The client's confirm waits for every part: the local
// store's answer (if the message also went to queues here) and each
// home's confirm; it is an ack only if all were acks. A home that
// returns the part (the queue is gone there) counts as not routed: a
// mandatory message routed nowhere is returned to the client before its
// confirm, as for a local unroutable one. Parts are matched to the
// home's confirms by the upstream channel's publish sequence, and a
// basic.return to its part by the routing key, properties and body the
// part was sent with (the first such part not returned yet).
//
// A part whose upstream channel ends before its confirm (the home went
// away) is a nack: the message may or may not be stored there, never
// silently lost. Each part holds one of the connection's publish slots
// (maxPendingPublishes) until its home answers.

import (
	"bytes"
	"slices"
	"time"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// fwdJoin is one client publish waiting for its parts (confirmer only).
type fwdJoin struct {
	seq          uint64 // the client's publish sequence (0: not in confirm mode)
	parts        int    // parts not yet answered
	localPending bool   // the local store's answer is one of them
	ok           bool   // every part answered so far was an ack
	routed       int    // parts that reached a queue
	mandatory    bool
	exchange     string
	key          string
	props, body  []byte
}

// fwdPart is one message sent to a home and not yet confirmed.
type fwdPart struct {
	upSeq       uint64 // its publish sequence on the upstream channel
	jid         uint64
	key         string
	props, body []byte
	sent        time.Time
	returned    bool // the home returned it (guarded by fc.mu)
}

// remoteDest is a queue homed on another group.
type remoteDest struct {
	peer  Peer
	queue string
}

// jidLocal marks join ids outside confirm mode (in confirm mode a join's
// id is the publish sequence).
const jidLocal = 1 << 63

// remoteDests returns the queues homed on other groups that a message
// published with m (content properties props) goes to (qs: those here):
// through the default exchange, the routing key's queue when no queue
// here has that name; through an exchange, the queues of its bindings
// to other groups' queues (forward_bind.go) that their homes still hold.
func (ch *channel) remoteDests(m *wire.BasicPublish, props []byte, qs []*queue) ([]remoteDest, error) {
	var names []string
	if m.Exchange == "" || m.Exchange == "amq.default" {
		if len(qs) > 0 || m.RoutingKey == "" {
			return nil, nil
		}
		names = []string{m.RoutingKey}
	} else {
		if !ch.c.vh.remoteBound.Load() {
			return nil, nil
		}
		_, remote, err := ch.c.vh.routeAll(m, m.Exchange, m.RoutingKey, props)
		if err != nil || len(remote) == 0 {
			return nil, nil // the local path answers an exchange gone meanwhile
		}
		names = remote
	}
	// The message may go to another group: the publishes before it in
	// the read burst are stored first (a forwarded publish keeps its place
	// among the stored ones, and the look-ups below may wait on the
	// network). A message for queues here only stays in the burst's batch.
	ch.c.flushPublishes()
	var dests []remoteDest
	for _, name := range names {
		if ch.c.vh.queue(name) != nil {
			continue
		}
		p, ok, err := ch.c.lookupHome(name)
		if err != nil {
			return nil, err
		}
		if ok {
			dests = append(dests, remoteDest{peer: p, queue: name})
		}
	}
	return dests, nil
}

// publishForward sends the parts of a complete message bound for queues
// homed elsewhere. done: the message needs nothing more from the local
// path (it had no queue here); otherwise the local path stores it in qs
// and its answer is the join's local part. A borrowed body (the reader's
// frame, see publish) is copied before it is kept. Reader only.
func (ch *channel) publishForward(m *wire.BasicPublish, h *wire.Header, body []byte, borrowed bool, qs []*queue) (bool, error) {
	if !ch.c.forwards() {
		return false, nil
	}
	dests, err := ch.remoteDests(m, h.Raw, qs)
	if err != nil && ch.tx { // a transaction may not lose one of its messages
		ch.close(soft(wire.NotFound, m, "cannot tell where the message's queues live: %v", err))
		return true, nil
	}
	if err != nil {
		// The key's queue may be on a group that cannot be asked: not
		// confirmed, as the message reached no queue for sure.
		ch.c.srv.log.Warn("amqp: publish to a queue of unknown home", "queue", m.RoutingKey, "err", err)
		return true, ch.confirmed(false)
	}
	if len(dests) == 0 {
		return false, nil
	}
	if borrowed {
		body = slices.Clone(body) // kept with the parts until their confirms
	}
	if ch.tx { // held for the commit (tx.go)
		if err := ch.holdPublish(m, h, qs, dests, body); err != nil {
			ch.close(err.(*amqpError))
		}
		return true, nil
	}
	c := ch.c
	j := &fwdJoin{parts: len(dests), ok: true, mandatory: m.Mandatory, exchange: m.Exchange, key: m.RoutingKey}
	if m.Mandatory {
		j.props, j.body = h.Raw, body
	}
	var jid uint64
	if ch.confirm {
		j.seq = ch.publishSeq
		jid = j.seq
		if len(qs) > 0 {
			j.parts++
			j.localPending = true
		}
	} else {
		ch.fwd.joinID++
		jid = jidLocal | ch.fwd.joinID
	}
	if len(qs) > 0 {
		j.routed++ // the local store's refusal is a nack, not a return
	}
	c.later(func() {
		if ch.fwd.joins == nil {
			ch.fwd.joins = map[uint64]*fwdJoin{}
		}
		ch.fwd.joins[jid] = j
	})
	for _, d := range dests {
		fc, err := ch.fwdChan(d.peer)
		if err == nil {
			err = fc.setMode(modeConfirm)
		}
		if err != nil {
			c.srv.log.Warn("amqp: publish to another group's queue failed", "queue", d.queue, "group", d.peer.Group, "err", err)
			c.later(func() { ch.joinPart(jid, false, false) })
			continue
		}
		select {
		case c.publishSlots <- struct{}{}:
		case <-c.done:
			return true, errConnClosed
		}
		c.pubIssued++
		fc.mu.Lock()
		fc.seq++
		part := &fwdPart{upSeq: fc.seq, jid: jid, key: d.queue, props: h.Raw, body: body, sent: time.Now()}
		fc.pending = append(fc.pending, part)
		fc.mu.Unlock()
		if err := fc.uc.publish(&wire.BasicPublish{RoutingKey: d.queue, Mandatory: true}, h.Raw, body); err != nil {
			if fc.take(part) {
				fc.finish(part, false)
			}
		}
	}
	return len(qs) == 0, nil
}

// oldest is when the oldest part not yet confirmed was sent (zero: none).
func (fc *fwdChan) oldest() time.Time {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.pending) == 0 {
		return time.Time{}
	}
	return fc.pending[0].sent
}

// take removes part from the pending ones; false if it is no longer
// there (answered, or failed by the channel's end).
func (fc *fwdChan) take(part *fwdPart) bool {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for i, p := range fc.pending {
		if p == part {
			fc.pending = append(fc.pending[:i], fc.pending[i+1:]...)
			return true
		}
	}
	return false
}

// finish hands a part's answer to the confirmer and frees its slot.
func (fc *fwdChan) finish(p *fwdPart, ok bool) {
	c := fc.ch.c
	<-c.publishSlots
	returned := p.returned
	c.later(func() {
		fc.ch.joinPart(p.jid, ok, returned)
		c.publishDone()
	})
}

// confirm is the home's basic.ack or basic.nack (upstream reader).
func (fc *fwdChan) confirm(tag uint64, multiple, ack bool) {
	fc.mu.Lock()
	var done []*fwdPart
	keep := fc.pending[:0]
	for _, p := range fc.pending {
		if p.upSeq == tag || (multiple && p.upSeq < tag) {
			done = append(done, p)
		} else {
			keep = append(keep, p)
		}
	}
	clear(fc.pending[len(keep):])
	fc.pending = keep
	fc.mu.Unlock()
	for _, p := range done {
		fc.finish(p, ack)
	}
}

// returned is the home's basic.return of a part (upstream reader): its
// queue is gone there.
func (fc *fwdChan) returned(m *wire.BasicReturn, props, body []byte) {
	fc.ch.c.srv.homes.forget(homeKey(fc.ch.c.vh.name, m.RoutingKey))
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for _, p := range fc.pending {
		if !p.returned && p.key == m.RoutingKey && bytes.Equal(p.props, props) && bytes.Equal(p.body, body) {
			p.returned = true
			return
		}
	}
	for _, p := range fc.txSent { // a transaction's part being committed (tx.go)
		if !p.returned && p.queue == m.RoutingKey && bytes.Equal(p.props, props) && bytes.Equal(p.body, body) {
			p.returned = true
			return
		}
	}
}

// failPending nacks every part not yet confirmed (the upstream channel
// ended).
func (fc *fwdChan) failPending() {
	fc.mu.Lock()
	ps := fc.pending
	fc.pending = nil
	fc.mu.Unlock()
	for _, p := range ps {
		fc.finish(p, false)
	}
}

// joinPart counts one answered part of join jid (confirmer only); the
// last one answers the client.
func (ch *channel) joinPart(jid uint64, ok, returned bool) {
	j := ch.fwd.joins[jid]
	if j == nil {
		return
	}
	j.parts--
	j.ok = j.ok && ok
	if ok && !returned {
		j.routed++
	}
	if j.parts > 0 {
		return
	}
	delete(ch.fwd.joins, jid)
	ch.mu.Lock()
	closing := ch.closing
	ch.mu.Unlock()
	if closing {
		return
	}
	if j.ok && j.mandatory && j.routed == 0 {
		ch.c.flushAcks()
		ch.c.sendContent(ch.id, &wire.BasicReturn{ReplyCode: wire.NoRoute, ReplyText: "NO_ROUTE",
			Exchange: j.exchange, RoutingKey: j.key}, j.props, j.body)
	}
	ch.confirmSeq(j.seq, j.ok)
}

// localPart takes the local store's answer to publish seq if a join
// waits for it (confirmer only, from confirmSeq).
func (ch *channel) localPart(seq uint64, ok bool) bool {
	j := ch.fwd.joins[seq]
	if j == nil || !j.localPending {
		return false
	}
	j.localPending = false
	ch.joinPart(seq, ok, true) // counted as routed when the join began
	return true
}
