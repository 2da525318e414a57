package core

// The consumer offsets the store's disk-pressure retention asks for
// (store.SetConsumerOffsets, installed by New): which messages consumer
// groups still need. For every topic it lists the groups with a committed
// offset on one of its queues, and the groups whose online consumers
// subscribe to it; a group without an offset for a queue has consumed
// nothing of it. The Scheduler's durable delivery cursors, if it reports
// them, are listed as the pseudo-group ScheduleProgressGroup on the
// schedule topics. A topic no group consumes (DLQ topics, the transaction
// topics) is absent, and the store then keeps its messages (nobody has
// read them). Offsets are the committed ones (in memory, ahead of
// consumerOffset.json), which trail what consumers have processed: the
// store errs towards keeping data.

import "github.com/keelmq/keel/internal/store"

// ScheduleProgressGroup names the Scheduler's cursors in the store's log
// lines; parentheses are not valid in a group name, so it cannot be a
// real group.
const ScheduleProgressGroup = "(schedule)"

// ProgressReporter is implemented by a Scheduler that reports how far its
// deliveries are durable: topic -> queue -> offset (schedule.Service).
type ProgressReporter interface {
	Progress() map[string]map[int32]int64
}

// consumerOffsets is the store's ConsumerOffsetsFunc.
func (b *Broker) consumerOffsets() store.ConsumerOffsets {
	out := b.OffsetsByTopic()
	b.consumers.addSubscribed(out)
	if p, ok := b.Scheduler().(ProgressReporter); ok {
		for topic, byID := range p.Progress() {
			groups := out[topic]
			if groups == nil {
				groups = map[string]map[int32]int64{}
				out[topic] = groups
			}
			groups[ScheduleProgressGroup] = byID
		}
	}
	return out
}

// ConsumerOffsets returns what the store's retention is told consumer
// groups still need (see the file comment).
func (b *Broker) ConsumerOffsets() store.ConsumerOffsets { return b.consumerOffsets() }
