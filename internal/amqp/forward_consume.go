package amqp

// Consuming a queue homed on another group through this door
// (forward.go): basic.consume, basic.get and basic.cancel forwarded on the
// channel's upstream channel, the home's deliveries handed to the client
// under delivery tags of the client's channel, and their settlements sent
// back one delivery tag at a time.

import (
	"errors"

	"github.com/keelmq/keel/internal/amqp/wire"
)

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

// forwardCancel cancels a forwarded consumer. What the home delivered
// before its cancel-ok still goes to the client (the consumer is dropped
// only then), as AMQP has it.
func (ch *channel) forwardCancel(m *wire.BasicCancel) (bool, error) {
	ch.mu.Lock()
	fc := ch.fwd.cons[m.ConsumerTag]
	ch.mu.Unlock()
	if fc == nil {
		return false, nil
	}
	_, err := fc.uc.call(&wire.BasicCancel{ConsumerTag: m.ConsumerTag})
	ch.mu.Lock()
	if ch.fwd.cons[m.ConsumerTag] == fc {
		delete(ch.fwd.cons, m.ConsumerTag)
	}
	delete(fc.consumers, m.ConsumerTag)
	ch.mu.Unlock()
	if err != nil && !errors.Is(err, errUpstreamClosed) {
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
// on to the local path too. On a transactional channel the settlements
// are held for the commit (tx.go).
func (ch *channel) forwardSettle(m wire.Method, tag uint64, multiple bool, up func(uint64) wire.Method) (bool, error) {
	ch.mu.Lock()
	if len(ch.fwd.tags) == 0 {
		ch.mu.Unlock()
		return false, nil
	}
	var rs []remoteTag
	var ts []uint64
	if multiple {
		for t, r := range ch.fwd.tags {
			if tag == 0 || t <= tag {
				rs, ts = append(rs, r), append(ts, t)
				delete(ch.fwd.tags, t)
			}
		}
	} else if r, ok := ch.fwd.tags[tag]; ok {
		rs, ts = append(rs, r), append(ts, tag)
		delete(ch.fwd.tags, tag)
	}
	local := multiple && ch.unacked.anyUpTo(tag)
	if ch.tx {
		for i, r := range rs {
			ch.txFwdAcks = append(ch.txFwdAcks, txFwdAck{tag: ts[i], r: r, m: up(r.tag)})
		}
	}
	ch.mu.Unlock()
	if len(rs) == 0 {
		return false, nil
	}
	if ch.tx {
		return !local, nil
	}
	for _, r := range rs {
		// A failed upstream channel requeued the delivery already there.
		r.fc.uc.send(up(r.tag))
	}
	return !local, nil
}
