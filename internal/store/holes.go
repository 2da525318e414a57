package store

import (
	"errors"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
)

// holeEntrySize is the Size of a ConsumeQueue entry that stands for a
// record lost in a hole record (see package commitlog): the hole's header,
// which a read of it finds and reports as ErrHole.
const holeEntrySize = commitlog.MinHoleBytes - commitlog.TrailerBytes

// appendEntry appends e at queue offset qo to q during dispatch. A repair
// may have replaced records of q that were never dispatched by a hole
// record; their queue offsets must not vanish (queues are dense and
// consumers count on them), so if the dispatcher skipped a hole after q's
// last entry, the gap up to qo is filled with entries pointing at that
// hole, which readers skip as lost and Check counts as such. dispatchMu is
// held.
func (s *Store) appendEntry(q *consumequeue.Queue, qid int32, qo int64, e consumequeue.Entry) error {
	err := q.Append(qo, e)
	if !errors.Is(err, consumequeue.ErrGap) {
		return err
	}
	hole := s.reader.LastHole()
	last, ok := q.LastEntry()
	if hole < 0 || !ok || hole <= last.PhysOffset || hole >= e.PhysOffset {
		return err
	}
	from := q.MaxOffset()
	for off := from; off < qo; off++ {
		if err := q.Append(off, consumequeue.Entry{PhysOffset: hole, Size: holeEntrySize}); err != nil {
			return err
		}
	}
	s.logger.Warn("store: queue entries of records lost to a corruption repair point at its hole record",
		"topic", q.Topic(), "queue_id", qid, "from", from, "to", qo, "hole", hole)
	return q.Append(qo, e)
}
