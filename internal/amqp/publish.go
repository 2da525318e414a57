package amqp

import (
	"context"
	"slices"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
)

// startPublish begins basic.publish: the content header and body follow.
func (ch *channel) startPublish(m *wire.BasicPublish) error {
	if m.Immediate {
		return hard(wire.NotImplemented, m, "immediate=true")
	}
	if _, err := ch.c.vh.route(m, m.Exchange, m.RoutingKey, nil); err != nil {
		return err
	}
	if ch.confirm {
		ch.publishSeq++
	}
	ch.pub = m
	return nil
}

// content takes a content header or body frame of the publish in progress.
func (ch *channel) content(f wire.Frame) error {
	ch.mu.Lock()
	closing := ch.closing
	ch.mu.Unlock()
	if closing {
		return nil
	}
	if ch.pub == nil {
		return hard(wire.UnexpectedFrame, nil, "content frame on channel %d without basic.publish", ch.id)
	}
	if f.Type == wire.FrameHeader {
		if ch.hdr != nil {
			return hard(wire.UnexpectedFrame, ch.pub, "a second content header")
		}
		h, err := wire.ReadHeader(f.Payload)
		if err != nil {
			return hard(wire.FrameError, ch.pub, "content header: %v", err)
		}
		// Config.MaxMessageBytes (amqpMaxMessageSize), as RabbitMQ's
		// max_message_size: a larger message closes the channel with 406.
		if limit := ch.c.srv.cfg.MaxMessageBytes; h.BodySize > uint64(limit) {
			m := ch.pub
			ch.pub = nil
			ch.close(soft(wire.PreconditionFailed, m, "message size %d is larger than the configured max size %d", h.BodySize, limit))
			return nil
		}
		if h.Props.Flags&wire.FlagExpiration != 0 {
			if _, ok := parseExpiration(h.Props.Expiration); !ok {
				m := ch.pub
				ch.pub = nil
				ch.close(soft(wire.PreconditionFailed, m, "invalid expiration '%s': not a non-negative integer of milliseconds", h.Props.Expiration))
				return nil
			}
		}
		if err := ch.reserveBody(int64(h.BodySize)); err != nil {
			return err
		}
		ch.hdrIn = h // the channel's own: no new Header per message
		ch.hdr = &ch.hdrIn
		// The body's room grows with the body frames that come, not with
		// the size the header announces: a header costs the client a few
		// bytes, and a connection may begin a publish on each channel.
		ch.body = nil
	} else {
		if ch.hdr == nil {
			return hard(wire.UnexpectedFrame, ch.pub, "body frame before the content header")
		}
		if uint64(len(ch.body)+len(f.Payload)) > ch.hdr.BodySize {
			return hard(wire.FrameError, ch.pub, "body of more than the %d bytes the header announced", ch.hdr.BodySize)
		}
		if len(ch.body) == 0 && uint64(len(f.Payload)) == ch.hdr.BodySize {
			// The whole body in one frame (most messages): published
			// from the frame itself, which stays the reader's until its
			// next frame, not copied out first.
			pub, hdr := ch.pub, ch.hdr
			ch.pub, ch.hdr = nil, nil
			err := ch.publish(pub, hdr, f.Payload, true)
			ch.dropBody()
			return err
		}
		ch.body = growBody(ch.body, len(f.Payload), ch.hdr.BodySize)
		ch.body = append(ch.body, f.Payload...)
	}
	if uint64(len(ch.body)) < ch.hdr.BodySize {
		return nil
	}
	pub, hdr, body := ch.pub, ch.hdr, ch.body
	ch.pub, ch.hdr, ch.body = nil, nil, nil
	err := ch.publish(pub, hdr, body, false)
	ch.dropBody() // stored (or refused): the body's bytes are the store's now
	return err
}

// reserveBody takes a body's bytes from the frame budget when its content
// header arrives, so that bodies being received count against the
// broker's budget (maxInFlightRequestBytes) however slowly they come, and
// holds them until the message is stored or dropped (dropBody). A body
// above half the budget reserves half: such a message may be as large as
// amqpMaxMessageSize allows, and the budget must stay shared. With no
// body of its own arriving, the connection waits for the bytes (its
// reader stops, which pushes back on the client). With another body
// arriving on one of its channels it cannot wait (that body's frames come
// after this header on the same socket): it takes the bytes if they fit
// now, else the connection is closed with 506 RESOURCE_ERROR.
func (ch *channel) reserveBody(size int64) error {
	c := ch.c
	fb := c.srv.cfg.FrameBudget
	if fb == nil || size == 0 {
		return nil
	}
	n := min(size, max(fb.CapacityBytes()/2, 1))
	if c.bodyHeld == 0 {
		if !fb.ClaimBytes(n, c.srv.stop) {
			return errConnClosed // the server is closing
		}
	} else if !fb.TryClaimBytes(n) {
		return hard(wire.ResourceError, ch.pub, "the broker's budget for message bodies being received is full while another message's body (%d bytes held) is still arriving on this connection: publish one message at a time per connection", c.bodyHeld)
	}
	ch.bodyClaim = n
	c.bodyHeld += n
	return nil
}

// dropBody forgets the body arriving on the channel, if any, and gives
// its reservation back.
func (ch *channel) dropBody() {
	ch.pub, ch.hdr, ch.body = nil, nil, nil
	if ch.bodyClaim > 0 {
		ch.c.srv.cfg.FrameBudget.ReleaseBytes(ch.bodyClaim)
		ch.c.bodyHeld -= ch.bodyClaim
		ch.bodyClaim = 0
	}
}

// growBody makes room in body for n more bytes of a body of size bytes in
// all: at least doubling what has arrived, never beyond size. So a body
// costs at most twice its bytes in allocations, the last one exactly its
// size, and the room never runs ahead of the bytes received by more than
// what has arrived (a header's announced size reserves nothing).
func growBody(body []byte, n int, size uint64) []byte {
	if len(body)+n <= cap(body) {
		return body
	}
	c := uint64(max(2*cap(body), len(body)+n, 4096))
	c = min(c, size)
	nb := make([]byte, len(body), c)
	copy(nb, body)
	return nb
}

// publish routes and stores a complete message, then answers: basic.return
// first for an unroutable mandatory message, then the confirm. A routed
// message is confirmed when the store acknowledges it, which under
// SYNC_FLUSH is after fdatasync (the Confirmed watermark). A borrowed
// body is the reader's frame buffer: it is laid out in the batch (or
// written) before publish returns, and copied where it is kept longer
// (a transaction's, one forwarded to another group's queue).
func (ch *channel) publish(m *wire.BasicPublish, h *wire.Header, body []byte, borrowed bool) error {
	start := time.Now()
	qs, err := ch.c.vh.route(m, m.Exchange, m.RoutingKey, h.Raw)
	if err != nil {
		return err // the exchange went away since the publish began
	}
	if borrowed && ch.tx {
		body = slices.Clone(body) // held until tx.commit
	}
	if ch.c.acct != nil {
		for _, q := range qs {
			if q.ownsTopic() {
				continue
			}
			if err := ch.c.allowTopic(m, acl.Pub, q.topic); err != nil {
				ch.close(err.(*amqpError))
				return nil
			}
		}
	}
	c := ch.c
	if done, err := ch.publishForward(m, h, body, borrowed && !ch.tx, qs); done || err != nil { // forward_publish.go
		return err
	}
	if ch.tx {
		if err := ch.holdPublish(m, h, qs, nil, body); err != nil {
			ch.close(err.(*amqpError))
		}
		return nil
	}
	sm := storedMessage{exchange: m.Exchange, routingKey: m.RoutingKey, props: h.Raw, body: body}
	qs, refused := admit(qs, &sm)
	if len(qs) == 0 && refused {
		c.srv.observeSend(nil, len(body), "REFUSED", start)
		return ch.confirmed(false)
	}
	if len(qs) == 0 {
		if m.Mandatory {
			err := c.sendContent(ch.id, &wire.BasicReturn{ReplyCode: wire.NoRoute, ReplyText: "NO_ROUTE",
				Exchange: m.Exchange, RoutingKey: m.RoutingKey}, h.Raw, body)
			if err != nil {
				return err
			}
		}
		return ch.confirmed(true)
	}
	// One record, one ConsumeQueue entry per queue (fan-out stores the
	// message once), laid out in the connection's batch: the publishes of
	// one read burst are stored with one append (publishbatch.go).
	b := &c.batch
	var one [1]record.Dest
	dests := one[:0]
	if len(qs) > 1 {
		dests = make([]record.Dest, 0, len(qs))
	}
	for _, q := range qs {
		dests = append(dests, record.Dest{Topic: q.topic, QueueID: queueID})
	}
	b.msg = appendMessage(b.msg[:0], &sm)
	if len(b.buf) > 0 && len(b.buf)+len(b.msg)+recordOverheadBytes(dests) > c.batchLimit() {
		c.flushPublishes()
	}
	at := len(b.buf)
	buf, err := record.AppendEnvelope(b.buf, record.AMQP, 1, dests, b.msg)
	if cap(b.msg) > 2*maxBatchBytes {
		b.msg = nil
	}
	if err == nil {
		err = c.srv.store.CheckRecord(buf[at:])
	}
	if err != nil {
		b.buf = buf[:at]
		unadmit(qs, len(body))
		c.srv.observeSend(qs, len(body), "MESSAGE_ILLEGAL", start)
		return ch.confirmed(false)
	}
	b.buf = buf
	select {
	case c.publishSlots <- struct{}{}:
	default:
		// Every slot is taken: what the batch holds goes to the store
		// first (its confirms free slots), then the reader waits.
		b.buf = b.buf[:at]
		c.flushPublishes()
		b.buf = append(b.buf, buf[at:]...)
		select {
		case c.publishSlots <- struct{}{}:
		case <-c.done:
			b.buf = b.buf[:0]
			unadmit(qs, len(body))
			return errConnClosed
		}
	}
	b.ends = append(b.ends, len(b.buf))
	b.pubs = append(b.pubs, batchedPub{ch: ch, qs: qs, seq: ch.publishSeq, refused: refused,
		expiring: h.Props.Flags&wire.FlagExpiration != 0, size: len(body), start: start})
	if len(b.pubs) >= maxBatchPublishes || len(b.buf) >= c.batchLimit() {
		c.flushPublishes()
	}
	return nil
}

// recordOverheadBytes bounds what a record's envelope adds to its body.
func recordOverheadBytes(dests []record.Dest) int {
	n := 256
	for _, d := range dests {
		n += len(d.Topic) + 32
	}
	return n
}

// admit drops from qs the reject-publish queues that are full (refused
// reports whether there was one) and reserves room for message m in the
// others. A full reject-publish-dlx queue dead-letters m (a copy, on the
// server's worker), as RabbitMQ does.
func admit(qs []*queue, m *storedMessage) (_ []*queue, refused bool) {
	if !slices.ContainsFunc(qs, func(q *queue) bool { return q.a.rejectPublish && q.a.limited() }) {
		return qs, false // nothing to admit: qs as routed
	}
	out := qs[:0:0]
	for _, q := range qs {
		if q.a.rejectPublish && q.a.limited() {
			q.mu.Lock()
			ok := q.admitLocked(int64(len(m.body)))
			q.mu.Unlock()
			if !ok {
				q.stats.refused.Add(1)
				refused = true
				if q.a.rejectDLX && q.a.hasDLX {
					q.v.srv.deadLetterRefused(q, m)
				}
				continue
			}
		}
		out = append(out, q)
	}
	return out, refused
}

// unadmit returns the room admit reserved for a publish (of a body of
// size bytes) not stored.
func unadmit(qs []*queue, size int) {
	for _, q := range qs {
		q.mu.Lock()
		q.unreserveLocked(int64(size))
		q.mu.Unlock()
	}
}

// waitVisible waits until the store's Visible watermark reaches off (the
// message is in its queues) or the store closes.
func waitVisible(ctx context.Context, st *store.Store, off int64) error {
	return st.WaitFor(ctx, store.Visible, off, 0)
}

// confirmed confirms the current publish, after those still pending on
// the connection's confirmer.
func (ch *channel) confirmed(ok bool) error {
	seq := ch.publishSeq
	ch.c.later(func() { ch.confirmSeq(seq, ok) })
	return nil
}

// confirmSeq confirms publish seq (0: the channel is not in confirm mode),
// unless the channel is closing. It runs on the confirmer. Confirms may
// come out of publish order (a publish the store answers at once, or an
// unroutable one, overtakes those it is still flushing). An ack of the
// lowest unconfirmed publish is held back, with the ones that follow it
// in order, to go out as one basic.ack with multiple=true
// (conn.flushAcks): that covers only publishes all confirmed. An ack out
// of order, and every nack, goes out alone (multiple=false), after the
// acks held back.
func (ch *channel) confirmSeq(seq uint64, ok bool) {
	ch.mu.Lock()
	closing := ch.closing
	ch.mu.Unlock()
	if seq == 0 || closing || ch.localPart(seq, ok) {
		return
	}
	if ok && seq == ch.confirmLow {
		if ch.ackTo == 0 {
			ch.ackFrom = seq
			ch.c.acking = append(ch.c.acking, ch)
		}
		ch.ackTo = seq
		ch.confirmLow++
		for ch.confirmedAbove[ch.confirmLow] {
			delete(ch.confirmedAbove, ch.confirmLow)
			ch.confirmLow++
		}
		return
	}
	ch.sendAcks()
	if seq == ch.confirmLow {
		ch.confirmLow++
		for ch.confirmedAbove[ch.confirmLow] {
			delete(ch.confirmedAbove, ch.confirmLow)
			ch.confirmLow++
		}
	} else {
		ch.confirmedAbove[seq] = true
	}
	if ok {
		ch.c.send(ch.id, &wire.BasicAck{DeliveryTag: seq})
	} else {
		ch.c.send(ch.id, &wire.BasicNack{DeliveryTag: seq})
	}
}

// sendAcks sends the acks held back (confirmer only).
func (ch *channel) sendAcks() {
	if ch.ackTo == 0 {
		return
	}
	from, to := ch.ackFrom, ch.ackTo
	ch.ackFrom, ch.ackTo = 0, 0
	ch.mu.Lock()
	closing := ch.closing
	ch.mu.Unlock()
	if !closing {
		ch.c.send(ch.id, &wire.BasicAck{DeliveryTag: to, Multiple: to > from})
	}
}

// flushAcks sends every channel's acks held back (confirmer only).
func (c *conn) flushAcks() {
	for _, ch := range c.acking {
		ch.sendAcks()
	}
	clear(c.acking)
	c.acking = c.acking[:0]
}
