package amqp

import (
	"errors"
	"sync"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/amqp/wire"
)

// channel is one AMQP channel of a connection. Methods run on the
// connection's reader; deliveries come from queue pumps.
type channel struct {
	c  *conn
	id uint16

	mu             sync.Mutex // guards what follows; taken after a queue's mu
	closing        bool       // channel.close sent, waiting for close-ok
	nextTag        uint64
	unacked        unackedList // in tag order (unacked.go)
	consumers      map[string]*consumer
	prefetch       int // basic.qos global=false: for consumers started after it
	globalPrefetch int // basic.qos global=true: for the whole channel
	globalUnacked  int

	// Confirmer goroutine only (publish.go, confirmSeq): every publish
	// below confirmLow is confirmed (sent, or held back in
	// ackFrom..ackTo; 0: none held); confirmedAbove holds the publishes
	// above it confirmed out of order.
	confirmLow     uint64
	confirmedAbove map[uint64]bool
	ackFrom, ackTo uint64

	// txAcks are the acknowledgements a transaction holds (tx.go): taken
	// out of unacked, still counted against prefetch.
	txAcks []txAck
	// txFwdAcks are the held settlements of deliveries from other
	// groups' queues (tx.go), taken out of fwd.tags.
	txFwdAcks []txFwdAck

	// fwd is what is forwarded to other groups (forward.go).
	fwd chanForward

	// Reader goroutine only.
	confirm    bool
	tx         bool        // tx.select: publishes and acks held until tx.commit (tx.go)
	txPubs     []txPublish // the publishes held
	txBytes    int         // their bytes (bounded by txMaxBytes)
	txDests    int         // their (message, queue) pairs (bounded by record.MaxDests)
	publishSeq uint64
	lastQueue  string    // the last queue declared, for "" in later methods
	lookupAt   time.Time // forwardDeclare found no home for the queue declared (claim.go)
	pub        *wire.BasicPublish
	// pubIn and ackIn are the channel's basic.publish and basic.ack as
	// the reader decodes them (hotmethods.go); pub points at pubIn while
	// its content arrives, hdr at hdrIn once its header has (publish
	// keeps neither past the message).
	pubIn wire.BasicPublish
	ackIn wire.BasicAck
	hdrIn wire.Header
	hdr   *wire.Header
	body  []byte
	// bodyClaim is what reserveBody took from the frame budget for the
	// body arriving now (0: none); reader goroutine only.
	bodyClaim int64
}

func newChannel(c *conn, id uint16) *channel {
	return &channel{c: c, id: id, consumers: map[string]*consumer{},
		confirmLow: 1, confirmedAbove: map[uint64]bool{}}
}

// method runs one method. A channel exception closes the channel and is
// not returned; a connection exception is.
func (ch *channel) method(m wire.Method) error {
	ch.mu.Lock()
	closing := ch.closing
	ch.mu.Unlock()
	if closing {
		switch m.(type) {
		case *wire.ChannelCloseOk:
			ch.c.dropChannel(ch.id)
		case *wire.ChannelClose:
			ch.c.send(ch.id, &wire.ChannelCloseOk{})
		}
		return nil // everything else is dropped until close-ok
	}
	if ch.pub != nil {
		return hard(wire.UnexpectedFrame, m, "%s while the content of basic.publish was expected", m.Name())
	}
	err := ch.dispatch(m)
	if err == nil {
		return nil // before errors.As, whose target would cost an allocation per method
	}
	var ae *amqpError
	if errors.As(err, &ae) && !ae.hard {
		ch.close(ae)
		return nil
	}
	return err
}

func (ch *channel) dispatch(m wire.Method) error {
	if err := ch.permitted(m); err != nil {
		return err
	}
	switch m.(type) {
	case *wire.BasicGet, *wire.QueueDeclare, *wire.QueuePurge, *wire.QueueDelete:
		if err := ch.c.waitPublishes(); err != nil {
			return err
		}
	}
	if done, err := ch.forward(m); done { // a queue homed on another group
		return err
	}
	switch m := m.(type) {
	case *wire.ChannelClose:
		ch.shutdown()
		ch.c.dropChannel(ch.id)
		return ch.c.send(ch.id, &wire.ChannelCloseOk{})
	case *wire.ChannelFlow:
		if !m.Active {
			return hard(wire.NotImplemented, m, "active=false is not supported")
		}
		return ch.c.send(ch.id, &wire.ChannelFlowOk{Active: true})
	case *wire.ChannelFlowOk:
		return nil
	case *wire.ExchangeDeclare:
		return ch.exchangeDeclare(m)
	case *wire.QueueDeclare:
		return ch.queueDeclare(m)
	case *wire.QueueDelete:
		return ch.queueDelete(m)
	case *wire.QueuePurge:
		q, err := ch.findQueue(m, m.Queue)
		if err != nil {
			return err
		}
		if q.isStream() {
			return soft(wire.PreconditionFailed, m, "purge not supported by %s", q.rs())
		}
		n := q.purge()
		if m.NoWait {
			return nil
		}
		return ch.c.send(ch.id, &wire.QueuePurgeOk{MessageCount: n})
	case *wire.ExchangeDelete:
		if err := ch.c.vh.deleteExchange(m); err != nil || m.NoWait {
			return err
		}
		return ch.c.send(ch.id, &wire.ExchangeDeleteOk{})
	case *wire.QueueBind:
		if m.Queue == "" {
			m.Queue = ch.lastQueue
		}
		if err := ch.c.vh.bind(m, ch.c, m.Exchange, m.Queue, m.RoutingKey, m.Arguments, false, false); err != nil || m.NoWait {
			return err
		}
		return ch.c.send(ch.id, &wire.QueueBindOk{})
	case *wire.ExchangeBind:
		if err := ch.c.vh.bind(m, ch.c, m.Source, m.Destination, m.RoutingKey, m.Arguments, true, false); err != nil || m.NoWait {
			return err
		}
		return ch.c.send(ch.id, &wire.ExchangeBindOk{})
	case *wire.ExchangeUnbind:
		if err := ch.c.vh.bind(m, ch.c, m.Source, m.Destination, m.RoutingKey, m.Arguments, true, true); err != nil || m.NoWait {
			return err
		}
		return ch.c.send(ch.id, &wire.ExchangeUnbindOk{})
	case *wire.QueueUnbind:
		if m.Queue == "" {
			m.Queue = ch.lastQueue
		}
		if err := ch.c.vh.bind(m, ch.c, m.Exchange, m.Queue, m.RoutingKey, m.Arguments, false, true); err != nil {
			return err
		}
		return ch.c.send(ch.id, &wire.QueueUnbindOk{})
	case *wire.BasicQos:
		return ch.qos(m)
	case *wire.BasicConsume:
		return ch.consume(m)
	case *wire.BasicCancel:
		return ch.cancel(m)
	case *wire.BasicPublish:
		return ch.startPublish(m)
	case *wire.BasicGet:
		return ch.get(m)
	case *wire.BasicAck:
		return ch.settle(m, m.DeliveryTag, m.Multiple, false, false)
	case *wire.BasicNack:
		return ch.settle(m, m.DeliveryTag, m.Multiple, true, m.Requeue)
	case *wire.BasicReject:
		return ch.settle(m, m.DeliveryTag, false, true, m.Requeue)
	case *wire.BasicRecover:
		ch.requeueAll()
		return ch.c.send(ch.id, &wire.BasicRecoverOk{})
	case *wire.ConfirmSelect:
		if ch.tx {
			return soft(wire.PreconditionFailed, m, "cannot switch from tx to confirm mode")
		}
		ch.confirm = true
		if m.Nowait {
			return nil
		}
		return ch.c.send(ch.id, &wire.ConfirmSelectOk{})
	case *wire.TxSelect:
		return ch.txSelect(m)
	case *wire.TxCommit:
		return ch.txCommit(m)
	case *wire.TxRollback:
		return ch.txRollback(m)
	}
	return hard(wire.CommandInvalid, m, "%s is not a client method on a channel", m.Name())
}

// permitted checks m against the connection's account (auth.go).
func (ch *channel) permitted(m wire.Method) error {
	c := ch.c
	if c.acct == nil {
		return nil
	}
	q := func(name string) string {
		if name == "" {
			return ch.lastQueue
		}
		return name
	}
	switch m := m.(type) {
	case *wire.ExchangeDeclare:
		return c.allow(m, acl.Any, m.Exchange)
	case *wire.ExchangeDelete:
		return c.allow(m, acl.Any, m.Exchange)
	case *wire.ExchangeBind:
		// The destination receives the source's messages: that is
		// reading the source.
		if err := c.allow(m, acl.Sub, m.Source); err != nil {
			return err
		}
		return c.allow(m, acl.Any, m.Destination)
	case *wire.ExchangeUnbind:
		return c.allow(m, acl.Any, m.Source, m.Destination)
	case *wire.QueueDeclare:
		if t, _ := keelTopic(m.Arguments); t != "" && !m.Passive {
			if err := c.allowTopic(m, acl.Sub, t); err != nil {
				return err
			}
		}
		if m.Queue == "" && !m.Passive {
			return nil // server-named: a new queue of the connection's own
		}
		return c.allow(m, acl.Any, q(m.Queue))
	case *wire.QueueDelete:
		return c.allow(m, acl.Any, q(m.Queue))
	case *wire.QueuePurge:
		return c.allow(m, acl.Sub, q(m.Queue))
	case *wire.QueueBind:
		// The queue receives the exchange's messages: that is reading
		// the exchange.
		if err := c.allow(m, acl.Sub, m.Exchange); err != nil {
			return err
		}
		return c.allow(m, acl.Any, q(m.Queue))
	case *wire.QueueUnbind:
		return c.allow(m, acl.Any, q(m.Queue), m.Exchange)
	case *wire.BasicConsume:
		return c.allow(m, acl.Sub, q(m.Queue))
	case *wire.BasicGet:
		return c.allow(m, acl.Sub, q(m.Queue))
	case *wire.BasicPublish:
		if m.Exchange == "" || m.Exchange == "amq.default" {
			return c.allow(m, acl.Pub, m.RoutingKey)
		}
		return c.allow(m, acl.Pub, m.Exchange)
	}
	return nil
}

// close sends channel.close for a channel exception and releases what the
// channel holds; frames are then dropped until close-ok.
func (ch *channel) close(e *amqpError) {
	first := ch.shutdown()
	ch.dropBody()
	ch.txPubs, ch.txBytes, ch.txDests = nil, 0, 0
	if first {
		ch.c.srv.cfg.Traffic.Error()
		ch.c.logException(ch.id, e)
		ch.c.send(ch.id, &wire.ChannelClose{ReplyCode: e.code, ReplyText: e.replyText(), ClassId: e.classID, MethodId: e.methodID})
	}
}

// timeOut closes the channel from outside its connection's reader (the
// consumer timeout): as close, but the reader's own fields stay its own.
func (ch *channel) timeOut(e *amqpError) {
	if ch.shutdown() {
		ch.c.srv.cfg.Traffic.Error()
		ch.c.logException(ch.id, e)
		ch.c.send(ch.id, &wire.ChannelClose{ReplyCode: e.code, ReplyText: e.replyText(), ClassId: e.classID, MethodId: e.methodID})
	}
}

// shutdown marks the channel closing, cancels its consumers and requeues
// its unacknowledged deliveries (with redelivered set when served again).
// It reports whether the channel was open (only then does a server-side
// close send channel.close).
func (ch *channel) shutdown() bool {
	ch.mu.Lock()
	first := !ch.closing
	ch.closing = true
	cs := ch.consumers
	ch.consumers = map[string]*consumer{}
	for _, a := range ch.txAcks { // not applied: unacknowledged still
		ch.unacked.add(a.tag, a.d)
	}
	ds := ch.unacked.takeAll()
	ch.txAcks = nil
	ch.txFwdAcks = nil // their homes requeue them when closeForwards ends their channels
	ch.mu.Unlock()
	ch.closeForwards()
	// The deliveries go back before the consumers go: the next consumer
	// of a single-active-consumer queue gets them first, in order (the
	// closing channel's consumers get nothing meanwhile).
	pump := map[*queue]bool{}
	for _, e := range ds {
		e.d.q.requeue(e.d.offset)
		pump[e.d.q] = true
	}
	for _, c := range cs {
		ch.dropConsumer(c)
		pump[c.q] = true
	}
	for q := range pump {
		q.pump()
	}
	return first
}

func (ch *channel) dropConsumer(c *consumer) {
	if c.q.removeConsumer(c) {
		if err := ch.c.vh.remove(c.q); err != nil {
			ch.c.srv.log.Error("amqp: auto-delete queue", "queue", c.q.name, "err", err)
		}
	}
}

// consumerGone is called when a consumer's queue was deleted: the client
// is told with basic.cancel (consumer_cancel_notify).
func (ch *channel) consumerGone(c *consumer) {
	ch.mu.Lock()
	cur, ok := ch.consumers[c.tag]
	ok = ok && cur == c
	if ok {
		delete(ch.consumers, c.tag)
	}
	ready := c.ready
	c.gone = true
	closing := ch.closing
	ch.mu.Unlock()
	if ok && ready && !closing {
		ch.c.send(ch.id, &wire.BasicCancel{ConsumerTag: c.tag, NoWait: true})
	}
}

func (ch *channel) exchangeDeclare(m *wire.ExchangeDeclare) error {
	if err := ch.c.vh.declareExchange(m); err != nil || m.NoWait {
		return err
	}
	return ch.c.send(ch.id, &wire.ExchangeDeclareOk{})
}

func (ch *channel) queueDeclare(m *wire.QueueDeclare) error {
	if m.Queue == "" && ch.lastQueue != "" && m.Passive {
		m.Queue = ch.lastQueue
	}
	if a, ok := m.Arguments[claimArg]; ok && m.Passive && ch.c.fromPeer {
		return ch.answerClaimMethod(m, a) // claim.go
	}
	if done, err := ch.claimDeclare(m); done {
		return err
	}
	q, err := ch.c.vh.declare(ch.c, m)
	if err != nil {
		return err
	}
	ch.lastQueue = q.name
	if m.NoWait {
		return nil
	}
	msgs, cons := q.counts()
	return ch.c.send(ch.id, &wire.QueueDeclareOk{Queue: q.name, MessageCount: msgs, ConsumerCount: cons})
}

func (ch *channel) findQueue(m wire.Method, name string) (*queue, error) {
	if name == "" {
		name = ch.lastQueue
	}
	q := ch.c.vh.queue(name)
	if q == nil {
		return nil, soft(wire.NotFound, m, "no queue '%s' in vhost '%s'", name, ch.c.vh.name)
	}
	if q.owner != nil && q.owner != ch.c {
		return nil, soft(wire.ResourceLocked, m, "cannot obtain exclusive access to locked queue '%s' in vhost '%s'", name, ch.c.vh.name)
	}
	return q, nil
}

func (ch *channel) queueDelete(m *wire.QueueDelete) error {
	q, err := ch.findQueue(m, m.Queue)
	if err != nil {
		if ae := (*amqpError)(nil); errors.As(err, &ae) && ae.code == wire.NotFound {
			// RabbitMQ answers delete-ok for a queue that does not exist.
			if m.NoWait {
				return nil
			}
			return ch.c.send(ch.id, &wire.QueueDeleteOk{})
		}
		return err
	}
	msgs, cons := q.counts()
	if m.IfUnused && cons > 0 {
		return soft(wire.PreconditionFailed, m, "queue '%s' in vhost '%s' in use", q.name, ch.c.vh.name)
	}
	if m.IfEmpty && msgs > 0 {
		return soft(wire.PreconditionFailed, m, "queue '%s' in vhost '%s' is not empty", q.name, ch.c.vh.name)
	}
	if err := ch.c.vh.remove(q); err != nil {
		return hard(wire.InternalError, m, "cannot write the queue definitions: %v", err)
	}
	if m.NoWait {
		return nil
	}
	return ch.c.send(ch.id, &wire.QueueDeleteOk{MessageCount: msgs})
}

func (ch *channel) qos(m *wire.BasicQos) error {
	if m.PrefetchSize != 0 {
		return hard(wire.NotImplemented, m, "prefetch_size!=0 (%d)", m.PrefetchSize)
	}
	ch.mu.Lock()
	if m.Global {
		ch.globalPrefetch = int(m.PrefetchCount)
	} else {
		ch.prefetch = int(m.PrefetchCount)
	}
	ch.mu.Unlock()
	ch.pumpAll()
	return ch.c.send(ch.id, &wire.BasicQosOk{})
}

func (ch *channel) consume(m *wire.BasicConsume) error {
	q, err := ch.findQueue(m, m.Queue)
	if err != nil {
		return err
	}
	var start int64
	if q.isStream() {
		if start, err = ch.streamConsume(m, q); err != nil { // stream.go
			return err
		}
	}
	tag := m.ConsumerTag
	if tag == "" {
		tag = "amq.ctag-" + newTopic()[6:]
	}
	ch.mu.Lock()
	if _, dup := ch.consumers[tag]; dup {
		ch.mu.Unlock()
		return hard(wire.NotAllowed, m, "attempt to reuse consumer tag '%s'", tag)
	}
	prio := 0
	if v, ok := m.Arguments["x-priority"]; ok {
		n, isInt := intValue(v)
		if !isInt || n != int64(int32(n)) {
			ch.mu.Unlock()
			return soft(wire.PreconditionFailed, m, "invalid arg 'x-priority': %v is not an integer", tableString(v))
		}
		prio = int(n)
	}
	c := &consumer{ch: ch, q: q, tag: tag, noAck: m.NoAck, prefetch: ch.prefetch, priority: prio}
	ch.consumers[tag] = c
	ch.mu.Unlock()
	if q.isStream() {
		q.addReader(c, start)
	}
	// The queue knows the consumer before consume-ok, so that a delete in
	// between cancels it; it gets deliveries only after consume-ok.
	if !q.addConsumer(c) {
		ch.mu.Lock()
		delete(ch.consumers, tag)
		ch.mu.Unlock()
		return soft(wire.NotFound, m, "no queue '%s' in vhost '%s'", q.name, ch.c.vh.name)
	}
	if !m.NoWait {
		if err := ch.c.send(ch.id, &wire.BasicConsumeOk{ConsumerTag: tag}); err != nil {
			return err
		}
	}
	ch.mu.Lock()
	c.ready = true
	gone, closing := c.gone, ch.closing
	ch.mu.Unlock()
	if gone {
		if !closing {
			return ch.c.send(ch.id, &wire.BasicCancel{ConsumerTag: tag, NoWait: true})
		}
		return nil
	}
	q.pump()
	return nil
}

func (ch *channel) cancel(m *wire.BasicCancel) error {
	ch.mu.Lock()
	c := ch.consumers[m.ConsumerTag]
	delete(ch.consumers, m.ConsumerTag)
	ch.mu.Unlock()
	if c != nil {
		ch.dropConsumer(c)
	}
	if !m.NoWait {
		if err := ch.c.send(ch.id, &wire.BasicCancelOk{ConsumerTag: m.ConsumerTag}); err != nil {
			return err
		}
	}
	if c != nil {
		c.q.pump() // a single active consumer's successor takes over
	}
	return nil
}

// hasCredit reports whether c may be given one more delivery.
func (ch *channel) hasCredit(c *consumer) bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closing || ch.consumers[c.tag] != c || !c.ready {
		return false
	}
	if c.noAck {
		return true
	}
	return (c.prefetch == 0 || c.unacked < c.prefetch) && (ch.globalPrefetch == 0 || ch.globalUnacked < ch.globalPrefetch)
}

// deliver sends basic.deliver for the message at offset o to c; false if
// the channel is closing (the caller requeues).
func (ch *channel) deliver(c *consumer, o int64, m *storedMessage, redelivered bool) bool {
	ch.mu.Lock()
	if ch.closing || ch.consumers[c.tag] != c || !c.ready {
		ch.mu.Unlock()
		return false
	}
	ch.nextTag++
	tag := ch.nextTag
	if !c.noAck {
		ch.unacked.add(tag, delivery{q: c.q, offset: o, cons: c, at: nowMs()})
		c.unacked++
		ch.globalUnacked++
	}
	ch.mu.Unlock()
	c.q.stats.delivered.Add(1)
	if redelivered {
		c.q.stats.redelivered.Add(1)
	}
	ch.c.srv.observeDeliver(c.q)
	ch.c.sendDeliverHeld(ch.id, &wire.BasicDeliver{ConsumerTag: c.tag, DeliveryTag: tag, Redelivered: redelivered,
		Exchange: m.exchange, RoutingKey: m.routingKey}, m.props, m.body)
	return true
}

func (ch *channel) get(m *wire.BasicGet) error {
	q, err := ch.findQueue(m, m.Queue)
	if err != nil {
		return err
	}
	if q.isStream() {
		return hard(wire.NotImplemented, m, "basic.get not supported by stream queues %s", q.rs())
	}
	o, msg, release, redelivered, left, ok := q.get()
	if !ok {
		return ch.c.send(ch.id, &wire.BasicGetEmpty{})
	}
	defer release()
	ch.mu.Lock()
	ch.nextTag++
	tag := ch.nextTag
	if !m.NoAck {
		ch.unacked.add(tag, delivery{q: q, offset: o, at: nowMs()})
	}
	ch.mu.Unlock()
	q.stats.delivered.Add(1)
	if redelivered {
		q.stats.redelivered.Add(1)
	}
	ch.c.srv.observeDeliver(q)
	if m.NoAck {
		q.settle(o)
		q.stats.acked.Add(1)
	}
	return ch.c.sendContent(ch.id, &wire.BasicGetOk{DeliveryTag: tag, Redelivered: redelivered, Exchange: msg.exchange,
		RoutingKey: msg.routingKey, MessageCount: left}, msg.props, msg.body)
}

// settle implements basic.ack (reject false), basic.nack and basic.reject.
// A message rejected without requeue is dead-lettered (or dropped without
// a dead-letter exchange).
func (ch *channel) settle(m wire.Method, tag uint64, multiple, reject, requeue bool) error {
	ch.mu.Lock()
	var oneD [1]delivery
	var oneT [1]uint64
	ds, tags := oneD[:0], oneT[:0]
	if multiple {
		ds, tags = ch.unacked.upTo(tag, ds, tags)
	} else if d, ok := ch.unacked.get(tag); ok {
		ds, tags = append(ds, d), append(tags, tag)
	}
	if reject {
		if err := streamReject(m, ds); err != nil { // stream.go
			ch.mu.Unlock()
			return err
		}
	}
	for i, t := range tags {
		if ch.tx {
			ch.unacked.remove(t) // held by the transaction, applied at commit
		} else {
			ch.forgetLocked(t, ds[i])
		}
	}
	if ch.tx {
		ch.holdAcksLocked(tags, ds, reject, requeue)
	}
	ch.mu.Unlock()
	if len(ds) == 0 && (!multiple || tag != 0) {
		return soft(wire.PreconditionFailed, m, "unknown delivery tag %d", tag)
	}
	if ch.tx {
		return nil
	}
	for _, d := range ds {
		switch {
		case reject && requeue:
			d.q.requeue(d.offset)
		case reject:
			d.q.reject(d.offset, ch.c)
		default:
			d.q.settle(d.offset)
			d.q.stats.acked.Add(1)
		}
		ch.c.pumpLater(d.q)
	}
	return nil
}

func (ch *channel) forgetLocked(tag uint64, d delivery) {
	ch.unacked.remove(tag)
	if d.cons != nil {
		d.cons.unacked--
		ch.globalUnacked--
	}
}

func (ch *channel) requeueAll() {
	ch.mu.Lock()
	ds := ch.unacked.takeAll()
	for _, e := range ds {
		if e.d.cons != nil {
			e.d.cons.unacked--
			ch.globalUnacked--
		}
	}
	ch.mu.Unlock()
	pump := map[*queue]bool{}
	for _, e := range ds {
		e.d.q.requeue(e.d.offset)
		pump[e.d.q] = true
	}
	for q := range pump {
		q.pump()
	}
}

func (ch *channel) pumpAll() {
	ch.mu.Lock()
	qs := map[*queue]bool{}
	for _, c := range ch.consumers {
		qs[c.q] = true
	}
	ch.mu.Unlock()
	for q := range qs {
		q.pump()
	}
}

// credit is how many more deliveries c may be given now, at most limit.
func (ch *channel) credit(c *consumer, limit int) int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closing || ch.consumers[c.tag] != c || !c.ready {
		return 0
	}
	n := limit
	if !c.noAck && c.prefetch > 0 {
		n = min(n, c.prefetch-c.unacked)
	}
	if !c.noAck && ch.globalPrefetch > 0 {
		n = min(n, ch.globalPrefetch-ch.globalUnacked)
	}
	return max(n, 0)
}
