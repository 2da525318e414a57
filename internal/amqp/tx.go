package amqp

// Transactions (tx.select, tx.commit, tx.rollback), with RabbitMQ's
// semantics: on a transactional channel, publishes and basic.ack, nack
// and reject are held and applied at tx.commit; tx.rollback discards
// them (the deliveries whose acknowledgements it discards are
// unacknowledged again, not requeued). Confirms and transactions are
// exclusive on a channel (406 either way).
//
// A commit's messages are stored as one CommitLog record (message.go's
// transaction layout: one destination per message and queue), so a crash
// leaves all of them or none, and they become visible together when that
// record is dispatched. tx.commit-ok is sent once the record is stored
// as the flush mode demands (after fdatasync under SYNC_FLUSH) and in its
// queues, and after the held acknowledgements are applied and the
// acknowledgement state is written (acks.json), so a commit's acks
// survive a crash once commit-ok was sent. The publishes and the acks of
// one commit are not one write: a crash between the two leaves the
// published messages and the acked ones unacknowledged (redelivered),
// never a loss.
//
// Routing and the permission checks happen at publish (as in RabbitMQ);
// x-overflow=reject-publish admission, mandatory basic.return and the
// delivery happen at commit. A transaction is bounded: record.MaxDests
// (message, queue) pairs and txMaxBytes of messages (406 beyond); a
// publish to a queue over a Keel topic is refused in a transaction (its
// other protocols' readers take one message per record).

import (
	"errors"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
)

// txPublish is a publish held by a transaction.
type txPublish struct {
	qs        []*queue // routed to (at publish)
	mandatory bool
	exchange  string
	key       string
	props     []byte
	body      []byte
	expiring  bool
}

// txAck is an acknowledgement (ack, nack, reject) held by a transaction.
type txAck struct {
	tag             uint64
	d               *delivery
	reject, requeue bool
}

// txEntryBytes is what a held publish counts beyond its bytes.
const txEntryBytes = 64

// txMaxBytes bounds the messages one transaction holds beyond its first
// (which may be as large as a message outside a transaction): the
// largest message, within what one record may carry with its
// destinations.
func (ch *channel) txMaxBytes() int {
	srv := ch.c.srv
	return min(srv.cfg.MaxMessageBytes, srv.store.MaxRecordBodyBytes()-record.MaxDests*(record.MaxTopicBytes+21)-4096)
}

func (ch *channel) txSelect(m *wire.TxSelect) error {
	if ch.confirm {
		return soft(wire.PreconditionFailed, m, "cannot switch from confirm to tx mode")
	}
	ch.tx = true
	return ch.c.send(ch.id, &wire.TxSelectOk{})
}

// holdPublish keeps a routed publish for the commit.
func (ch *channel) holdPublish(m *wire.BasicPublish, h *wire.Header, qs []*queue, body []byte) error {
	for _, q := range qs {
		if !q.ownsTopic() {
			return soft(wire.PreconditionFailed, m, "queue '%s' in vhost '%s' is over Keel topic '%s': not served in a transaction", q.name, ch.c.vh.name, q.topic)
		}
	}
	if len(qs) == 0 && !m.Mandatory {
		return nil // nothing to store, nothing to return
	}
	n := len(m.Exchange) + len(m.RoutingKey) + len(h.Raw) + len(body) + txEntryBytes
	if limit := ch.txMaxBytes(); len(ch.txPubs) > 0 && ch.txBytes+n > limit {
		return soft(wire.PreconditionFailed, m, "transaction of more than %d bytes of messages", limit)
	}
	if ch.txDests+len(qs) > record.MaxDests {
		return soft(wire.PreconditionFailed, m, "transaction of more than %d messages and queues (each message once per queue it is routed to)", record.MaxDests)
	}
	ch.txBytes += n
	ch.txDests += len(qs)
	ch.txPubs = append(ch.txPubs, txPublish{qs: qs, mandatory: m.Mandatory, exchange: m.Exchange, key: m.RoutingKey,
		props: h.Raw, body: body, expiring: h.Props.Flags&wire.FlagExpiration != 0})
	return nil
}

// holdAcks keeps the deliveries ds (taken out of unacked under ch.mu,
// still counted against prefetch) for the commit. ch.mu is held.
func (ch *channel) holdAcksLocked(tags []uint64, ds []*delivery, reject, requeue bool) {
	for i, d := range ds {
		ch.txAcks = append(ch.txAcks, txAck{tag: tags[i], d: d, reject: reject, requeue: requeue})
	}
}

func (ch *channel) txRollback(m *wire.TxRollback) error {
	if !ch.tx {
		return soft(wire.PreconditionFailed, m, "channel is not transactional")
	}
	ch.txPubs, ch.txBytes, ch.txDests = nil, 0, 0
	ch.mu.Lock()
	for _, a := range ch.txAcks {
		ch.unacked[a.tag] = a.d // unacknowledged again
	}
	ch.txAcks = nil
	ch.mu.Unlock()
	return ch.c.send(ch.id, &wire.TxRollbackOk{})
}

func (ch *channel) txCommit(m *wire.TxCommit) error {
	if !ch.tx {
		return soft(wire.PreconditionFailed, m, "channel is not transactional")
	}
	pubs := ch.txPubs
	ch.txPubs, ch.txBytes, ch.txDests = nil, 0, 0
	if err := ch.commitPublishes(m, pubs); err != nil {
		return err
	}
	ch.mu.Lock()
	acks := ch.txAcks
	ch.txAcks = nil
	for _, a := range acks {
		if a.d.cons != nil {
			a.d.cons.unacked--
			ch.globalUnacked--
		}
	}
	ch.mu.Unlock()
	pump := map[*queue]bool{}
	durable := false
	for _, a := range acks {
		d := a.d
		switch {
		case a.reject && a.requeue:
			d.q.requeue(d.offset)
		case a.reject:
			d.q.reject(d.offset, ch.c)
		default:
			d.q.settle(d.offset)
			d.q.stats.acked.Add(1)
		}
		pump[d.q] = true
		durable = durable || d.q.persistent()
	}
	for q := range pump {
		q.pump()
	}
	if durable {
		if err := ch.c.vh.saveAcks(); err != nil {
			return hard(wire.InternalError, m, "cannot write the acknowledgement state: %v", err)
		}
	}
	return ch.c.send(ch.id, &wire.TxCommitOk{})
}

// commitPublishes stores a transaction's publishes as one record and
// puts them in their queues; it returns once they are there.
func (ch *channel) commitPublishes(m *wire.TxCommit, pubs []txPublish) error {
	c := ch.c
	var msgs [][]byte
	var counts []int
	var dests []record.Dest
	type placed struct {
		qs       []*queue
		expiring bool
	}
	var in []placed
	var admitted [][]*queue
	var sizes []int
	for _, p := range pubs {
		qs, refused := admit(p.qs, &storedMessage{exchange: p.exchange, routingKey: p.key, props: p.props, body: p.body})
		if len(qs) == 0 {
			if p.mandatory && !refused {
				err := c.sendContent(ch.id, &wire.BasicReturn{ReplyCode: wire.NoRoute, ReplyText: "NO_ROUTE",
					Exchange: p.exchange, RoutingKey: p.key}, p.props, p.body)
				if err != nil {
					for i, qs := range admitted {
						unadmit(qs, sizes[i])
					}
					return err
				}
			}
			continue
		}
		admitted = append(admitted, qs)
		sizes = append(sizes, len(p.body))
		msgs = append(msgs, appendMessage(nil, &storedMessage{exchange: p.exchange, routingKey: p.key, props: p.props, body: p.body}))
		counts = append(counts, len(qs))
		for _, q := range qs {
			dests = append(dests, record.Dest{Topic: q.topic, QueueID: queueID})
		}
		in = append(in, placed{qs: qs, expiring: p.expiring})
	}
	if len(msgs) == 0 {
		return nil
	}
	var rec []byte
	var err error
	if len(msgs) == 1 {
		rec, err = record.AppendEnvelope(nil, record.AMQP, 1, dests, msgs[0])
	} else {
		rec, err = record.AppendEnvelope(nil, record.AMQP, int32(len(msgs)), dests, appendTxBody(nil, msgs, counts))
	}
	msgs = nil
	var r store.PutResult
	phys := int64(-1)
	if err == nil {
		r, phys = c.srv.store.PutRecord(c.srv.baseCtx, rec)
	}
	if err != nil || r.Status != store.PutOK {
		for i, qs := range admitted {
			unadmit(qs, sizes[i])
		}
		if err == nil {
			err = r.Err
			if err == nil {
				err = errors.New(r.Status.String())
			}
		}
		if c.srv.baseCtx.Err() != nil {
			return errConnClosed
		}
		return hard(wire.InternalError, m, "the transaction could not be stored: %v", err)
	}
	if c.srv.store.VisibleOffset() < phys+1 {
		if waitVisible(c.srv.baseCtx, c.srv.store, phys+1) != nil {
			return errConnClosed // the store closed
		}
	}
	pump := map[*queue]bool{}
	for i, p := range in {
		for _, q := range p.qs {
			q.mu.Lock()
			q.unreserveLocked(int64(sizes[i]))
			q.expSeen = q.expSeen || p.expiring
			q.dropOverflowLocked()
			q.mu.Unlock()
			q.stats.published.Add(1)
			pump[q] = true
		}
	}
	for q := range pump {
		q.pump()
	}
	return nil
}
