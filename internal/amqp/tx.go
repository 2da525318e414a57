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
// In a cluster of groups (forward.go) a transaction may publish to and
// settle deliveries of queues homed on other groups. Those are held here
// too, and tx.commit commits them part by part: first each other group's
// part, in the order of the groups' names, on the channel's upstream
// channel to it (put in tx mode: its messages published through the
// default exchange, mandatory, its settlements sent with the home's
// delivery tags, then the home's own tx.commit, which stores that part
// as one record there); then the local part. commit-ok is sent only
// after every part was committed. A part that fails (its home down,
// unreachable, or refusing it) stops the commit: the client's channel
// is closed with an error naming the group, the parts not committed yet
// are discarded (an upstream channel's close rolls its home's part back;
// the settlements of the local part are not applied), and the parts
// committed before it stay committed. Each group's part is atomic, the
// whole is not: there is no prepare phase, so a failure between parts
// leaves the earlier parts applied (as a retry by the client may then
// duplicate their messages: at least once). A home whose commit-ok is
// lost to a connection's end may or may not have committed its part; the
// client gets the channel error all the same, never commit-ok.
// A channel that published to a group outside a transaction and still
// consumes from it refuses tx.select (406): its upstream channel there is
// in confirm mode.
//
// Routing and the permission checks happen at publish (as in RabbitMQ);
// x-overflow=reject-publish admission, mandatory basic.return and the
// delivery happen at commit. A transaction is bounded: record.MaxDests
// (message, queue) pairs and txMaxBytes of messages (406 beyond); a
// publish to a queue over a Keel topic is refused in a transaction (its
// other protocols' readers take one message per record).

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/keelmq/keel/internal/amqp/wire"
	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/store/record"
)

// txPublish is a publish held by a transaction.
type txPublish struct {
	qs        []*queue     // routed to (at publish)
	remote    []remoteDest // and to these queues of other groups
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
	d               delivery
	reject, requeue bool
}

// txFwdAck is a settlement of a delivery from another group's queue
// held by a transaction.
type txFwdAck struct {
	tag uint64    // the client's delivery tag
	r   remoteTag // the home's
	m   wire.Method
}

// txSent is a message of a transaction's part sent to its home and not
// yet committed there (guarded by its fwdChan's mu).
type txSent struct {
	pub         int // its index in the transaction's publishes
	queue       string
	props, body []byte
	returned    bool
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
	if !ch.tx {
		// An upstream channel that published in confirm mode cannot be
		// put in tx mode: one that serves nothing else is dropped (a new
		// one is opened for the transactions).
		for _, fc := range ch.fwd.chans {
			if fc.mode != modeConfirm {
				continue
			}
			ch.mu.Lock()
			busy := len(fc.consumers) > 0
			for _, r := range ch.fwd.tags {
				busy = busy || r.fc == fc
			}
			ch.mu.Unlock()
			if busy {
				return soft(wire.PreconditionFailed, m, "this channel published to broker group %s outside a transaction and still consumes from it: select tx before that", fc.peer.Group)
			}
			ch.dropFwdChan(fc)
			fc.failPending()
		}
	}
	ch.tx = true
	return ch.c.send(ch.id, &wire.TxSelectOk{})
}

// holdPublish keeps a routed publish for the commit.
func (ch *channel) holdPublish(m *wire.BasicPublish, h *wire.Header, qs []*queue, remote []remoteDest, body []byte) error {
	for _, q := range qs {
		if !q.ownsTopic() {
			return soft(wire.PreconditionFailed, m, "queue '%s' in vhost '%s' is over Keel topic '%s': not served in a transaction", q.name, ch.c.vh.name, q.topic)
		}
	}
	if len(qs) == 0 && len(remote) == 0 && !m.Mandatory {
		return nil // nothing to store, nothing to return
	}
	n := len(m.Exchange) + len(m.RoutingKey) + len(h.Raw) + len(body) + txEntryBytes
	if limit := ch.txMaxBytes(); len(ch.txPubs) > 0 && ch.txBytes+n > limit {
		return soft(wire.PreconditionFailed, m, "transaction of more than %d bytes of messages", limit)
	}
	if ch.txDests+len(qs)+len(remote) > record.MaxDests {
		return soft(wire.PreconditionFailed, m, "transaction of more than %d messages and queues (each message once per queue it is routed to)", record.MaxDests)
	}
	ch.txBytes += n
	ch.txDests += len(qs) + len(remote)
	ch.txPubs = append(ch.txPubs, txPublish{qs: qs, remote: remote, mandatory: m.Mandatory, exchange: m.Exchange, key: m.RoutingKey,
		props: h.Raw, body: body, expiring: h.Props.Flags&wire.FlagExpiration != 0})
	return nil
}

// holdAcks keeps the deliveries ds (taken out of unacked under ch.mu,
// still counted against prefetch) for the commit. ch.mu is held.
func (ch *channel) holdAcksLocked(tags []uint64, ds []delivery, reject, requeue bool) {
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
		ch.unacked.add(a.tag, a.d) // unacknowledged again
	}
	ch.txAcks = nil
	for _, a := range ch.txFwdAcks {
		if ch.fwd.tags == nil {
			ch.fwd.tags = map[uint64]remoteTag{}
		}
		ch.fwd.tags[a.tag] = a.r
	}
	ch.txFwdAcks = nil
	ch.mu.Unlock()
	return ch.c.send(ch.id, &wire.TxRollbackOk{})
}

func (ch *channel) txCommit(m *wire.TxCommit) error {
	if !ch.tx {
		return soft(wire.PreconditionFailed, m, "channel is not transactional")
	}
	pubs := ch.txPubs
	ch.txPubs, ch.txBytes, ch.txDests = nil, 0, 0
	ch.mu.Lock()
	fwdAcks := ch.txFwdAcks
	ch.txFwdAcks = nil
	ch.mu.Unlock()
	routed, err := ch.commitRemote(m, pubs, fwdAcks)
	if err != nil {
		return err // the channel closes: the local part is not applied
	}
	if err := ch.commitPublishes(m, pubs, routed); err != nil {
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

// commitPublishes stores a transaction's publishes to queues here as one
// record and puts them in their queues; it returns once they are there.
// routed[i] counts the queues of other groups that took pubs[i].
func (ch *channel) commitPublishes(m *wire.TxCommit, pubs []txPublish, routed []int) error {
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
	for i, p := range pubs {
		qs, refused := admit(p.qs, &storedMessage{exchange: p.exchange, routingKey: p.key, props: p.props, body: p.body})
		if len(qs) == 0 {
			if p.mandatory && !refused && routed[i] == 0 {
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

// txPart is what one transaction commits on one upstream channel.
type txPart struct {
	fc   *fwdChan
	pubs []int // indexes into the publishes, once per queue of the group
	qs   []string
	acks []txFwdAck
}

// commitRemote commits the parts of a transaction that concern other
// groups' queues, one group after the other (by name), and returns per
// publish how many of those queues took it. An error (a channel
// exception) stops at the first part that failed. Reader only.
func (ch *channel) commitRemote(m *wire.TxCommit, pubs []txPublish, acks []txFwdAck) ([]int, error) {
	routed := make([]int, len(pubs))
	var parts []*txPart
	part := func(fc *fwdChan) *txPart {
		for _, p := range parts {
			if p.fc == fc {
				return p
			}
		}
		p := &txPart{fc: fc}
		parts = append(parts, p)
		return p
	}
	var failed error
	for i, p := range pubs {
		for _, d := range p.remote {
			fc, err := ch.fwdChan(d.peer)
			if err != nil {
				if failed == nil {
					failed = ch.txPartError(m, d.peer, nil, err)
				}
				continue
			}
			tp := part(fc)
			tp.pubs, tp.qs = append(tp.pubs, i), append(tp.qs, d.queue)
		}
	}
	for _, a := range acks {
		tp := part(a.r.fc)
		tp.acks = append(tp.acks, a)
	}
	if failed != nil {
		return nil, failed
	}
	slices.SortStableFunc(parts, func(a, b *txPart) int { return strings.Compare(a.fc.peer.Group, b.fc.peer.Group) })
	var done []string
	for _, tp := range parts {
		if err := ch.commitPart(tp, pubs, routed); err != nil {
			return nil, ch.txPartError(m, tp.fc.peer, done, err)
		}
		done = append(done, tp.fc.peer.Group)
	}
	return routed, nil
}

// commitPart sends one part to its home and commits it there.
func (ch *channel) commitPart(tp *txPart, pubs []txPublish, routed []int) error {
	fc := tp.fc
	if err := fc.uc.failed(); err != nil {
		return err
	}
	if err := fc.setMode(modeTx); err != nil {
		return err
	}
	sent := make([]*txSent, len(tp.pubs))
	for i, pi := range tp.pubs {
		sent[i] = &txSent{pub: pi, queue: tp.qs[i], props: pubs[pi].props, body: pubs[pi].body}
	}
	fc.mu.Lock()
	fc.txSent = sent
	fc.mu.Unlock()
	defer func() {
		fc.mu.Lock()
		fc.txSent = nil
		fc.mu.Unlock()
	}()
	for _, s := range sent {
		if err := fc.uc.publish(&wire.BasicPublish{RoutingKey: s.queue, Mandatory: true}, s.props, s.body); err != nil {
			return err
		}
	}
	for _, a := range tp.acks {
		if err := fc.uc.send(a.m); err != nil {
			return err
		}
	}
	// The home's basic.return of a part's message comes before its
	// commit-ok, on the same channel: counted by then.
	r, err := fc.uc.call(&wire.TxCommit{})
	if err != nil {
		return err
	}
	if _, ok := r.m.(*wire.TxCommitOk); !ok {
		return fmt.Errorf("answered %s to tx.commit", r.m.Name())
	}
	fc.mu.Lock()
	for _, s := range sent {
		if !s.returned {
			routed[s.pub]++
		}
	}
	fc.mu.Unlock()
	return nil
}

// txPartError is the channel exception of a commit whose part on p's
// group failed; done names the groups whose parts were committed.
func (ch *channel) txPartError(m *wire.TxCommit, p Peer, done []string, err error) error {
	kept := "no part was committed"
	if len(done) > 0 {
		kept = "the parts of broker group " + strings.Join(done, ", ") + " stay committed"
	}
	code := uint16(wire.NotFound)
	why := fmt.Sprintf("%s is down or inaccessible: %v", p, err)
	var rc *remoteClose
	if errors.As(err, &rc) && rc.code < 500 {
		code = rc.code
		why = fmt.Sprintf("broker group %s refused it: %s", p.Group, strings.TrimPrefix(rc.text, codeNames[rc.code]+" - "))
	}
	return soft(code, m, "transaction not committed: its part on %s; %s, the rest is discarded", why, kept)
}
