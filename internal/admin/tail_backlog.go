package admin

import (
	"context"
)

// backlogQueue is one queue's part of a tail's backlog: the messages from
// next up to end (its max offset when the tail began), read pullBatch at a
// time.
type backlogQueue struct {
	addr      string
	qid       int32
	next, end int64
	buf       []Message
}

// tailBacklog calls fn with the messages stored in t's queues from their
// min offset up to the max offset t reports, merged across queues in store
// time order (then CommitLog offset: one broker's order of appending), not
// queue by queue. It holds at most pullBatch messages per queue.
func (c *Client) tailBacklog(ctx context.Context, t TopicDetail, fn func(Message) error) error {
	qs := make([]*backlogQueue, 0, len(t.Queues))
	for _, q := range t.Queues {
		if q.MaxOffset > q.MinOffset {
			qs = append(qs, &backlogQueue{addr: t.brokerAddr(q.Broker), qid: q.QueueID, next: q.MinOffset, end: q.MaxOffset})
		}
	}
	for {
		var first *backlogQueue
		for _, q := range qs {
			if err := c.fillBacklog(ctx, t.Name, q); err != nil {
				return err
			}
			if len(q.buf) > 0 && (first == nil || before(q.buf[0], first.buf[0])) {
				first = q
			}
		}
		if first == nil {
			return nil
		}
		m := first.buf[0]
		first.buf = first.buf[1:]
		if err := fn(m); err != nil {
			return err
		}
	}
}

// fillBacklog reads q's next batch once its buffer is empty.
func (c *Client) fillBacklog(ctx context.Context, topic string, q *backlogQueue) error {
	if len(q.buf) > 0 || q.next >= q.end {
		return nil
	}
	ms, err := c.readQueue(ctx, q.addr, topic, q.qid, q.next, int(min(q.end-q.next, pullBatch)))
	if err != nil {
		return err
	}
	for _, m := range ms {
		if m.QueueOffset >= q.end {
			break
		}
		q.buf = append(q.buf, m)
	}
	if len(q.buf) == 0 {
		q.next = q.end // nothing more below end (deleted by retention meanwhile)
		return nil
	}
	q.next = q.buf[len(q.buf)-1].QueueOffset + 1
	return nil
}

// before orders messages by store time, then CommitLog offset.
func before(a, b Message) bool {
	if !a.StoreTime.Equal(b.StoreTime) {
		return a.StoreTime.Before(b.StoreTime)
	}
	return a.CommitLogOffset < b.CommitLogOffset
}
