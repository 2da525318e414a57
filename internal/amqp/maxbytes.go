package amqp

// x-max-length-bytes: the bytes of message bodies ready in a queue.
//
// The queue does not keep every ready message's size: offsets below
// sizedTo are counted in readyBytes (each ready one once, read from the
// store when the count is first needed: after a publish, at an admission
// check, or after a restart for the whole backlog), offsets at or above
// it are not counted yet. A message leaving the ready state (handed out,
// dropped, expired, purged) subtracts its size if it was counted; its
// size is kept in heldSize until it is settled, so that a requeue adds it
// back without reading the store. So the count costs one store read per
// message published to the queue and memory per unsettled delivery; a
// queue without the argument does none of it.

// bodySizeLocked reads the body size of the message at offset o (0 if
// the store no longer has it).
func (q *queue) bodySizeLocked(o int64) int64 {
	m, release, ok := q.read(o)
	if !ok {
		return 0
	}
	n := int64(len(m.body))
	release()
	return n
}

// readyBytesLocked returns the bytes of the ready messages' bodies,
// counting the messages stored since it was last asked.
func (q *queue) readyBytesLocked() int64 {
	hi := q.v.srv.store.MaxOffset(q.topic, queueID)
	for o := max(q.sizedTo, q.floor); o < hi; o++ {
		if q.settled[o] || q.inflight[o] {
			continue
		}
		if n, ok := q.heldSize[o]; ok { // handed out before and requeued
			q.readyBytes += n
			continue
		}
		q.readyBytes += q.bodySizeLocked(o)
	}
	q.sizedTo = max(q.sizedTo, hi)
	return q.readyBytes
}

// leftReadyLocked notes that offset o, of size bytes, is no longer ready.
func (q *queue) leftReadyLocked(o, size int64) {
	if q.a.maxBytes < 0 {
		return
	}
	if n, ok := q.heldSize[o]; ok {
		size = n
	}
	if o < q.sizedTo {
		q.readyBytes -= size
	}
	if q.heldSize == nil {
		q.heldSize = map[int64]int64{}
	}
	q.heldSize[o] = size
}

// backToReadyLocked notes that the delivered offset o is ready again.
func (q *queue) backToReadyLocked(o int64) {
	if q.a.maxBytes >= 0 && o < q.sizedTo {
		q.readyBytes += q.heldSize[o]
	}
}

// overLimitLocked reports whether the queue holds more than its
// x-max-length or x-max-length-bytes (drop-head drops from the head
// while it does).
func (q *queue) overLimitLocked() bool {
	return (q.a.maxLen >= 0 && q.readyLocked() > q.a.maxLen) ||
		(q.a.maxBytes >= 0 && q.readyBytesLocked() > q.a.maxBytes)
}
