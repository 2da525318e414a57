package store

import (
	"fmt"
	"math"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
)

// Retention holds. A front door whose consumers settle messages one at a
// time instead of moving an offset that may fall behind retention (AMQP
// queues: a message stays until it is acknowledged) reports, per queue,
// the first queue offset it still needs, through the hook SetQueueHolds
// installs. Then:
//
//   - age-based retention (FileReservedTime at DeleteWhen) deletes no
//     CommitLog segment that the entry at a hold points into, nor any after
//     it (segments go oldest first). While a hold keeps an expired segment,
//     one WARN line names the held queues (again after the hold moved on);
//   - disk-pressure retention counts each hold as a consumer group named
//     HoldGroup: a held queue whose messages are all settled lets its
//     segments go, an unsettled one keeps them under the expired and
//     consumed policies (writes are then refused at the hard limit), and
//     PressureDeleteUnconsumed deletes them and reports the loss as for any
//     group.
//
// A queue the hook does not list is not held (RocketMQ's rule: messages
// expire by age whatever the consumers did).
//
// Age holds (SetAgeHolds) are the first kind's weaker sibling, for a
// topic kept longer than FileReservedTime (a Kafka topic's retention.ms):
// age-based retention keeps what they hold exactly as above, but disk
// pressure ignores them, so that a topic's long retention never makes the
// broker refuse writes: under pressure its oldest segments go as
// DiskPressureDelete decides for every queue (consumer groups' offsets).

// AgeHoldGroup names an age hold in retention's log lines.
const AgeHoldGroup = "(retention)"

// HoldGroup is the consumer-group name disk-pressure retention gives a
// hold in its log lines; parentheses are not valid in a RocketMQ group
// name, so it cannot be a real group.
const HoldGroup = "(held)"

// QueueHolds is, per topic and queue id, the first queue offset retention
// must keep.
type QueueHolds map[string]map[int32]int64

// QueueHoldsFunc returns a snapshot of the holds. Retention calls it from
// its own goroutine, once per round and once per segment it considers
// deleting for disk pressure.
type QueueHoldsFunc func() QueueHolds

// SetQueueHolds installs the hold hook (nil removes it).
func (s *Store) SetQueueHolds(fn QueueHoldsFunc) {
	if fn == nil {
		s.queueHolds.Store(nil)
		return
	}
	s.queueHolds.Store(&fn)
}

func (s *Store) holds() QueueHolds {
	if p := s.queueHolds.Load(); p != nil {
		return (*p)()
	}
	return nil
}

// SetAgeHolds installs the age-hold hook (nil removes it): what it
// returns is kept from age-based retention only, not from disk pressure.
func (s *Store) SetAgeHolds(fn QueueHoldsFunc) {
	if fn == nil {
		s.ageHolds.Store(nil)
		return
	}
	s.ageHolds.Store(&fn)
}

func (s *Store) ageHoldsNow() QueueHolds {
	if p := s.ageHolds.Load(); p != nil {
		return (*p)()
	}
	return nil
}

// withHolds returns offsets with every hold added as group HoldGroup
// (offsets itself is not changed).
func withHolds(offsets ConsumerOffsets, holds QueueHolds) ConsumerOffsets {
	if len(holds) == 0 {
		return offsets
	}
	out := make(ConsumerOffsets, len(offsets)+len(holds))
	for topic, groups := range offsets {
		out[topic] = groups
	}
	for topic, byID := range holds {
		groups := make(map[string]map[int32]int64, len(out[topic])+1)
		for g, o := range out[topic] {
			groups[g] = o
		}
		groups[HoldGroup] = byID
		out[topic] = groups
	}
	return out
}

// heldLimit returns the lowest CommitLog offset an entry at a hold (of
// either kind) points to (math.MaxInt64 if no hold pins anything) and the
// holds at it.
func (s *Store) heldLimit() (int64, []lostRange, error) {
	limit := int64(math.MaxInt64)
	var at []lostRange
	if err := s.heldBy(s.holds(), HoldGroup, &limit, &at); err != nil {
		return 0, nil, err
	}
	if err := s.heldBy(s.ageHoldsNow(), AgeHoldGroup, &limit, &at); err != nil {
		return 0, nil, err
	}
	return limit, at, nil
}

// heldBy lowers *limit to the CommitLog offset the entry at each of holds
// points to, gathering in *at the holds at the limit.
func (s *Store) heldBy(holds QueueHolds, group string, limit *int64, at *[]lostRange) error {
	for topic, byID := range holds {
		for id, from := range byID {
			q := s.lookupQueue(topic, id)
			if q == nil {
				continue
			}
			from = max(from, q.MinOffset())
			if from >= q.MaxOffset() {
				continue
			}
			var e [1]consumequeue.Entry
			n, err := q.Get(from, e[:])
			if err != nil {
				return fmt.Errorf("store: retention: read %s/%d at %d: %w", topic, id, from, err)
			}
			if n != 1 {
				continue
			}
			h := lostRange{topic, id, group, from, -1}
			switch {
			case e[0].PhysOffset < *limit:
				*limit, *at = e[0].PhysOffset, []lostRange{h}
			case e[0].PhysOffset == *limit:
				*at = append(*at, h)
			}
		}
	}
	return nil
}

// noteRetentionHeld logs, once until the hold moves, that an expired
// segment is kept for held queues.
func (s *Store) noteRetentionHeld(seg commitlog.Segment, held int64, at []lostRange) {
	if s.retentionHeld.Swap(held+1) == held+1 { // +1: the zero value is no hold yet, and a hold may be at offset 0
		return
	}
	s.logger.Warn("store: an expired CommitLog segment is kept for a queue hold: a queue that settles messages one at a time has not settled one in it ("+HoldGroup+"), or a topic is retained longer than fileReservedTime ("+AgeHoldGroup+")",
		"segment", seg.Path, "phys_offset", held, "waiting_for", formatLost(at))
}
