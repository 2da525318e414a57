package amqp

import (
	"slices"

	"github.com/keelmq/keel/internal/amqp/wire"
)

// Message priorities (x-max-priority on a classic queue, 1 to 255).
//
// The queue's messages stay in its one ConsumeQueue in publish order; what
// changes is the order they are served in. Offsets from the cursor on are
// moved, as they become visible, into an in-memory ready index: one
// ascending list of offsets per priority level (the message's priority
// property, 0 when absent, capped at x-max-priority), read from each
// stored message once. A message is served from the highest level that
// has one, the lowest offset first; a requeued one goes back to its place
// in its level. Nothing about the order is written anywhere: the index is
// rebuilt from the stored messages when the queue is first served after a
// start, so the order after a restart is the same. The cost is one store
// read per message published to the queue, 8 bytes of memory per ready
// message (plus a map entry per unsettled delivery), and, after a start,
// one read of every unsettled message of the queue before the first is
// served. Expiry looks at the head the queue serves next, as for other
// queues: a low-priority message past its time behind higher ones is
// dropped when it reaches the head, or when it is about to be served.

// byPriority reports whether the queue orders messages by priority.
func (q *queue) byPriority() bool { return q.a.maxPriority > 0 }

// messagePriority returns the priority property of raw content
// properties (0 when absent or unreadable).
func messagePriority(props []byte) uint8 {
	if len(props) < 2 || (uint16(props[0])<<8|uint16(props[1]))&wire.FlagPriority == 0 {
		return 0
	}
	var p wire.BasicProperties
	if p.Read(wire.NewReader(props)) != nil {
		return 0
	}
	return p.Priority
}

// indexLocked moves the offsets from the cursor to the queue's end into
// the ready index.
func (q *queue) indexLocked() {
	if q.levels == nil {
		q.levels = make([][]int64, q.a.maxPriority+1)
		q.heldPrio = map[int64]uint8{}
	}
	hi := q.v.srv.store.MaxOffset(q.topic, queueID)
	q.cursor = max(q.cursor, q.floor)
	for ; q.cursor < hi; q.cursor++ {
		o := q.cursor
		if q.settled[o] || q.inflight[o] {
			continue
		}
		p := uint8(0)
		if m, release, ok := q.read(o); ok {
			p = min(messagePriority(m.props), uint8(q.a.maxPriority))
			release()
		}
		q.levels[p] = append(q.levels[p], o)
	}
}

// prioHeadLocked returns the offset a priority queue serves next and its
// level.
func (q *queue) prioHeadLocked() (int64, int, bool) {
	q.indexLocked()
	for p := len(q.levels) - 1; p >= 0; p-- {
		if len(q.levels[p]) > 0 {
			return q.levels[p][0], p, true
		}
	}
	return 0, 0, false
}

// prioNextLocked takes the offset a priority queue serves next; it is
// flagged redelivered if it was handed out before (in this run, or
// before a restart).
func (q *queue) prioNextLocked() (int64, bool, bool) {
	o, p, ok := q.prioHeadLocked()
	if !ok {
		return 0, false, false
	}
	q.popPrioLocked(p)
	_, before := q.heldPrio[o]
	q.heldPrio[o] = uint8(p)
	return o, before || o < q.restoredD, true
}

// prioPopLocked takes o, the head prioHeadLocked returned (a message
// indexed since may head a higher level now).
func (q *queue) prioPopLocked(o int64) {
	for p, l := range q.levels {
		if len(l) > 0 && l[0] == o {
			q.popPrioLocked(p)
			q.heldPrio[o] = uint8(p)
			return
		}
	}
}

func (q *queue) popPrioLocked(p int) {
	q.levels[p] = q.levels[p][1:]
	if len(q.levels[p]) == 0 {
		q.levels[p] = nil // let the array go
	}
}

// prioRequeueLocked puts the handed-out offset o back at its place in its
// level.
func (q *queue) prioRequeueLocked(o int64) {
	q.indexLocked()
	l := &q.levels[q.heldPrio[o]]
	i, _ := slices.BinarySearch(*l, o)
	*l = slices.Insert(*l, i, o)
}

// prioPurgeLocked settles every ready message and returns how many.
func (q *queue) prioPurgeLocked() uint32 {
	q.indexLocked()
	n := uint32(0)
	for p, l := range q.levels {
		for _, o := range l {
			q.settleLocked(o)
			n++
		}
		q.levels[p] = nil
	}
	return n
}
