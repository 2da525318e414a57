package amqp

import (
	"time"

	"github.com/keelmq/keel/internal/store"
)

// pubBatch is what a connection's reader has routed and laid out of the
// publishes of one read burst, to store with one append
// (store.PutRecordsDeferred: one group-commit entry, one wait for the
// fdatasync) when the burst ends (flushPublishes). Reader goroutine only.
type pubBatch struct {
	pubs []batchedPub
	buf  []byte // the records, back to back
	ends []int  // where each record ends in buf
	recs [][]byte
	msg  []byte // scratch: one message's body layout (appendMessage)
}

// batchedPub is one publish of a batch: what its confirmer step needs.
type batchedPub struct {
	ch       *channel
	qs       []*queue
	seq      uint64
	refused  bool // a reject-publish queue refused it (the confirm is a nack)
	expiring bool // it has an expiration property
	size     int  // its body's bytes
	start    time.Time
}

// A batch is stored once it holds maxBatchPublishes publishes or
// maxBatchBytes of records, whichever comes first, so that its wait for
// publish slots (maxPendingPublishes) cannot be on itself and its memory
// stays small.
const (
	maxBatchPublishes = 256
	maxBatchBytes     = 1 << 20
)

// batchLimit is the bytes a batch may hold: maxBatchBytes, or less on a
// store whose segments take less in one append.
func (c *conn) batchLimit() int {
	return int(min(maxBatchBytes, c.srv.store.MaxAppendBytes()))
}

// flushPublishes stores the batch, if any: one append of its records in
// publish order; each publish is then confirmed on the connection's
// confirmer as it would have been alone (storedBatch). Reader only.
func (c *conn) flushPublishes() {
	b := &c.batch
	n := len(b.pubs)
	if n == 0 {
		return
	}
	b.recs = b.recs[:0]
	at := 0
	for _, end := range b.ends {
		b.recs = append(b.recs, b.buf[at:end:end])
		at = end
	}
	pubs := make([]batchedPub, n)
	copy(pubs, b.pubs)
	phys := make([]int64, n)
	finish := func(r store.PutResult) {
		for range pubs {
			<-c.publishSlots
		}
		result := r.Status.String()
		if r.Status == store.PutOK {
			result = "SUCCESS"
		}
		for i := range pubs {
			c.srv.observeSend(pubs[i].qs, pubs[i].size, result, pubs[i].start)
		}
		c.later(func() { c.storedBatch(pubs, phys, r) })
	}
	c.pubIssued += uint64(n)
	res, pending := c.srv.store.PutRecordsDeferred(c.srv.baseCtx, b.recs, phys, finish)
	if !pending {
		finish(res)
	}
	clear(b.pubs)
	clear(b.recs)
	b.pubs, b.recs, b.ends = b.pubs[:0], b.recs[:0], b.ends[:0]
	b.buf = b.buf[:0]
	if cap(b.buf) > 2*maxBatchBytes {
		b.buf = nil // a large message's record is not kept
	}
}

// storedBatch runs on the connection's confirmer once the store answered
// a batch: as stored for each of its publishes, in order. Once the batch
// is in its queues, the queues' accounting changes once per queue, every
// publish is confirmed (consecutive acks of a channel go out as one
// basic.ack with multiple=true, flushAcks), then the queues deliver, once
// the acks of the confirmer's whole run went out (pumpAfterAcks): one
// fdatasync answers several batches at once, and their confirms do not
// wait for each other's deliveries.
func (c *conn) storedBatch(pubs []batchedPub, phys []int64, r store.PutResult) {
	srv := c.srv
	defer func() {
		c.pubDone.Add(uint64(len(pubs)))
		select {
		case c.pubSig <- struct{}{}:
		default:
		}
	}()
	if r.Status != store.PutOK {
		srv.log.Error("amqp: publish not stored", "status", r.Status, "err", r.Err, "messages", len(pubs))
		for i := range pubs {
			unadmit(pubs[i].qs, pubs[i].size)
			pubs[i].ch.confirmSeq(pubs[i].seq, false)
		}
		return
	}
	last := phys[len(phys)-1]
	if srv.store.VisibleOffset() < last+1 {
		c.flushAcks()     // before waiting: what is confirmed goes out,
		c.flushAckPumps() // and what it made deliverable
		if waitVisible(srv.baseCtx, srv.store, last+1) != nil {
			return // the store closed
		}
	}
	// Most batches go to one queue: its lock is taken once for all.
	var one *queue
	many := false
	for i := range pubs {
		for _, q := range pubs[i].qs {
			if one == nil {
				one = q
			}
			many = many || q != one
		}
	}
	if !many && one != nil {
		one.mu.Lock()
		for i := range pubs {
			one.unreserveLocked(int64(pubs[i].size))
			one.expSeen = one.expSeen || pubs[i].expiring
		}
		one.dropOverflowLocked()
		one.mu.Unlock()
		one.stats.published.Add(uint64(len(pubs)))
	} else {
		for i := range pubs {
			for _, q := range pubs[i].qs {
				q.mu.Lock()
				q.unreserveLocked(int64(pubs[i].size))
				q.expSeen = q.expSeen || pubs[i].expiring
				q.dropOverflowLocked()
				q.mu.Unlock()
				q.stats.published.Add(1)
			}
		}
	}
	for i := range pubs {
		pubs[i].ch.confirmSeq(pubs[i].seq, !pubs[i].refused)
	}
	for i := range pubs {
		for _, q := range pubs[i].qs {
			c.pumpAfterAcks(q) // a set: each queue pumps once
		}
	}
}
