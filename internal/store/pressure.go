package store

import (
	"fmt"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/store/commitlog"
	"github.com/keelmq/keel/internal/store/consumequeue"
)

// Retention under disk pressure. While disk use is at or above
// DiskMaxUsedSpaceRatio, each retention round deletes the oldest CommitLog
// segment if DiskPressureDelete allows it, measures the disk again, and goes
// on one segment at a time (at most maxPressureDeletesPerRound) until use is
// below the ratio or the oldest segment may not go. A segment that may not
// go stops the round: segments are only ever deleted oldest first, and the
// store refuses writes at the hard limit instead (space.go).
//
// Whether a segment holds messages a consumer group has not consumed is
// decided per ConsumeQueue with the offsets the hook installed by
// SetConsumerOffsets reports (the broker's committed offsets): the queue
// loses messages if the entry at a group's offset (or, with no group, at
// the queue's min offset) points into the segment. A queue no group
// consumes counts as unconsumed: nobody has read it. Committed offsets lag
// what consumers have processed, so the check errs towards keeping data.
// Without a hook every queue counts as unconsumed.
//
// Each deletion that cost unconsumed messages (only possible with
// PressureDeleteUnconsumed, or when a queue's entries are out of CommitLog
// order) is logged at ERROR with the (queue, group, offset range) it cost and
// counted in Stats.UnconsumedDeleted.

const (
	// maxPressureDeletesPerRound bounds the segments one round deletes
	// for disk pressure; disk use is measured before each.
	maxPressureDeletesPerRound = 10
	// maxLoggedCosts bounds the lost ranges one log line lists (the
	// total is always given).
	maxLoggedCosts = 16
)

// ConsumerOffset is how far one consumer group has consumed a queue: the
// next queue offset it reads.
type ConsumerOffset struct {
	Group  string
	Offset int64
}

// ConsumerOffsets is, per topic, every consumer group that consumes it,
// with its committed offset per queue: topic -> group -> queue id -> next
// offset to consume. A group listed for a topic without an offset for one
// of its queues has consumed nothing of that queue.
type ConsumerOffsets map[string]map[string]map[int32]int64

// of returns the offsets of the groups consuming (topic, queueID), nil if
// no group does.
func (o ConsumerOffsets) of(topic string, queueID int32) []ConsumerOffset {
	groups := o[topic]
	if len(groups) == 0 {
		return nil
	}
	out := make([]ConsumerOffset, 0, len(groups))
	for g, byQueue := range groups {
		out = append(out, ConsumerOffset{Group: g, Offset: byQueue[queueID]})
	}
	return out
}

// ConsumerOffsetsFunc returns a snapshot of the consumer offsets. Retention
// calls it once per segment it considers deleting, from its own goroutine.
type ConsumerOffsetsFunc func() ConsumerOffsets

// SetConsumerOffsets installs the function retention asks which messages
// consumer groups still need (nil removes it: every queue then counts as
// unconsumed).
func (s *Store) SetConsumerOffsets(fn ConsumerOffsetsFunc) {
	if fn == nil {
		s.consumerOffsets.Store(nil)
		return
	}
	s.consumerOffsets.Store(&fn)
}

// queueFloor is a queue's state before a pressure deletion.
type queueFloor struct {
	ref    queueRef
	min    int64
	groups []ConsumerOffset // nil: no group consumes the queue
}

// lostRange is what deleting a segment cost one group on one queue: queue
// offsets [From, To) it had not consumed. Group "" is a queue no group
// consumes.
type lostRange struct {
	topic    string
	queueID  int32
	group    string
	from, to int64
}

// relievePressure deletes the oldest segments one at a time while disk use
// stays at or above DiskMaxUsedSpaceRatio and DiskPressureDelete allows it.
func (s *Store) relievePressure(now time.Time) error {
	for range maxPressureDeletesPerRound {
		usage, err := s.checkDisk()
		if err != nil {
			return fmt.Errorf("store: disk usage: %w", err)
		}
		if usage < float64(s.cfg.DiskMaxUsedSpaceRatio) {
			s.pressureKept.Store(nil)
			return nil
		}
		segs := s.log.Segments()
		if len(segs) < 2 || segs[1].Base > s.deletableLimit() {
			return nil // the last segment, or not dispatched and flushed yet
		}
		cut := segs[1].Base
		floors, unconsumed, err := s.queueFloors(cut)
		if err != nil {
			return err
		}
		young := s.cfg.DiskPressureDelete == PressureDeleteExpired && !s.segmentExpired(now, segs[0], cut)
		if why := s.keptBecause(unconsumed, young); why != "" {
			s.notePressureBlocked(why, usage, segs[0], floors, cut)
			return nil
		}
		if err := s.deleteBefore(cut); err != nil {
			return err
		}
		s.pressureKept.Store(nil)
		s.reportLost(segs[0], usage, lostRanges(floors))
	}
	return nil
}

// unconsumedQueues counts the queues a pressure deletion would cost
// messages: those some consumer group has not consumed, and those no group
// consumes (nobody has read them).
type unconsumedQueues struct{ byGroup, noGroup int }

// keptBecause returns why DiskPressureDelete keeps the oldest segment, ""
// if it may go: every reason that holds (a segment of unconsumed messages
// that is also young is kept for both), and, when only its age keeps it,
// that it is consumed — what the operator needs to know to free space.
func (s *Store) keptBecause(u unconsumedQueues, young bool) string {
	if s.cfg.DiskPressureDelete == PressureDeleteUnconsumed {
		return ""
	}
	var why []string
	if u.byGroup > 0 {
		why = append(why, "it holds messages a consumer group has not consumed ("+queuesText(u.byGroup)+")")
	}
	if u.noGroup > 0 {
		why = append(why, "it holds messages of queues no consumer group consumes, which count as unconsumed ("+queuesText(u.noGroup)+")")
	}
	switch {
	case young && len(why) > 0:
		why = append(why, "it is younger than fileReservedTime")
	case young:
		return "every consumer group has consumed it, but it is younger than fileReservedTime and diskPressureDelete=expired deletes only older segments (diskPressureDelete=consumed would delete it)"
	}
	return strings.Join(why, ", and ")
}

func queuesText(n int) string {
	if n == 1 {
		return "1 queue"
	}
	return fmt.Sprintf("%d queues", n)
}

// queueFloors snapshots every non-empty queue with the consumer offsets of
// its groups, and counts the queues that deleting the CommitLog below cut
// would cost messages some group (or, with no group, anybody) has not
// consumed.
func (s *Store) queueFloors(cut int64) (floors []queueFloor, unconsumed unconsumedQueues, err error) {
	var offsets ConsumerOffsets
	if p := s.consumerOffsets.Load(); p != nil {
		offsets = (*p)()
	}
	offsets = withHolds(offsets, s.holds()) // holds.go
	for _, ref := range s.allQueues() {
		lo, hi := ref.q.MinOffset(), ref.q.MaxOffset()
		if lo >= hi {
			continue
		}
		f := queueFloor{ref: ref, min: lo, groups: offsets.of(ref.topic, ref.id)}
		floors = append(floors, f)
		lose, err := s.wouldLose(f, hi, cut)
		if err != nil {
			return nil, unconsumedQueues{}, err
		}
		switch {
		case lose && len(f.groups) == 0:
			unconsumed.noGroup++
		case lose:
			unconsumed.byGroup++
		}
	}
	return floors, unconsumed, nil
}

// wouldLose reports whether an unconsumed entry of f's queue (from the
// lowest group offset, or the min offset with no group) points below cut.
func (s *Store) wouldLose(f queueFloor, hi, cut int64) (bool, error) {
	if len(f.groups) == 0 {
		return s.pointsBelow(f, f.min, hi, cut)
	}
	from := hi
	for _, g := range f.groups {
		from = min(from, max(g.Offset, f.min))
	}
	return s.pointsBelow(f, from, hi, cut)
}

// pointsBelow reports whether the entry at queue offset from (below hi)
// points into the CommitLog below cut.
func (s *Store) pointsBelow(f queueFloor, from, hi, cut int64) (bool, error) {
	if from >= hi {
		return false, nil
	}
	var e [1]consumequeue.Entry
	n, err := f.ref.q.Get(from, e[:])
	if err != nil {
		return false, fmt.Errorf("store: retention: read %s/%d at %d: %w", f.ref.topic, f.ref.id, from, err)
	}
	return n == 1 && e[0].PhysOffset < cut, nil
}

// lostRanges compares the queues after a deletion with floors, taken
// before it: every group offset (or, with no group, the old min offset)
// below a queue's new min offset lost the messages in between.
func lostRanges(floors []queueFloor) []lostRange {
	var lost []lostRange
	for _, f := range floors {
		newMin := f.ref.q.MinOffset()
		if newMin <= f.min {
			continue
		}
		if len(f.groups) == 0 {
			lost = append(lost, lostRange{f.ref.topic, f.ref.id, "", f.min, newMin})
		}
		for _, g := range f.groups {
			if from := max(g.Offset, f.min); from < newMin {
				lost = append(lost, lostRange{f.ref.topic, f.ref.id, g.Group, from, newMin})
			}
		}
	}
	return lost
}

// reportLost logs at ERROR and counts the unconsumed messages a pressure
// deletion of seg cost.
func (s *Store) reportLost(seg commitlog.Segment, usage float64, lost []lostRange) {
	if len(lost) == 0 {
		return
	}
	var msgs int64
	for _, l := range lost {
		msgs += l.to - l.from
	}
	s.stats.unconsumedDeleted.Add(msgs)
	s.stats.unconsumedSegments.Add(1)
	s.logger.Error("store: disk pressure deleted messages consumer groups had not consumed",
		"segment", seg.Path, "usage_percent", usage, "messages", msgs, "queue_groups", len(lost),
		"lost", formatLost(lost), "policy", s.cfg.DiskPressureDelete.String())
}

// notePressureBlocked logs that the oldest segment may not be deleted and
// why: once until disk use falls or a deletion succeeds, and again
// whenever the reasons change (a group catching up on its backlog).
func (s *Store) notePressureBlocked(why string, usage float64, seg commitlog.Segment, floors []queueFloor, cut int64) {
	if old := s.pressureKept.Swap(&why); old != nil && *old == why {
		return
	}
	var behind []lostRange
	for _, f := range floors {
		hi := f.ref.q.MaxOffset()
		if len(f.groups) == 0 {
			if lose, err := s.pointsBelow(f, f.min, hi, cut); err == nil && lose {
				behind = append(behind, lostRange{f.ref.topic, f.ref.id, "", f.min, -1})
			}
		}
		for _, g := range f.groups {
			from := max(g.Offset, f.min)
			if lose, err := s.pointsBelow(f, from, hi, cut); err == nil && lose {
				behind = append(behind, lostRange{f.ref.topic, f.ref.id, g.Group, from, -1})
			}
		}
	}
	s.logger.Warn("store: disk above diskMaxUsedSpaceRatio, but the oldest CommitLog segment is kept: "+why+
		"; writes are refused when free space reaches the reserve (see diskPressureDelete)",
		"segment", seg.Path, "usage_percent", usage, "limit_percent", s.cfg.DiskMaxUsedSpaceRatio,
		"policy", s.cfg.DiskPressureDelete.String(), "waiting_for", formatLost(behind))
}

// formatLost renders up to maxLoggedCosts ranges as
// "topic/queue group=G offsets=[from,to)".
func formatLost(lost []lostRange) []string {
	out := make([]string, 0, min(len(lost), maxLoggedCosts)+1)
	for i, l := range lost {
		if i == maxLoggedCosts {
			out = append(out, fmt.Sprintf("... %d more", len(lost)-i))
			break
		}
		group := l.group
		if group == "" {
			group = "(none)"
		}
		if l.to < 0 {
			out = append(out, fmt.Sprintf("%s/%d group=%s offset=%d", l.topic, l.queueID, group, l.from))
			continue
		}
		out = append(out, fmt.Sprintf("%s/%d group=%s offsets=[%d,%d)", l.topic, l.queueID, group, l.from, l.to))
	}
	return out
}
