package broker

// The consumer offsets the store's disk-pressure retention asks for
// (store.SetConsumerOffsets, installed by New): which messages consumer
// groups still need. For every topic it lists the groups with a committed
// offset on one of its queues, and the groups whose online consumers
// subscribe to it; a group without an offset for a queue has consumed
// nothing of it. The schedule engine's durable delivery cursors are listed
// as the pseudo-group scheduleProgressGroup on the schedule topics. A topic
// no group consumes (DLQ topics, the transaction topics) is absent, and the
// store then keeps its messages (nobody has read them). Offsets are the
// committed ones (in memory, ahead of consumerOffset.json), which trail
// what consumers have processed: the store errs towards keeping data.

import "github.com/keelmq/keel/internal/store"

// scheduleProgressGroup names the schedule engine's cursors in the
// store's log lines; parentheses are not valid in a RocketMQ group name, so
// it cannot be a real group.
const scheduleProgressGroup = "(schedule)"

// progressReporter is implemented by a Scheduler that reports how far its
// deliveries are durable (schedule.Service).
type progressReporter interface {
	Progress() map[string]map[int32]int64
}

// consumerOffsets is the store's ConsumerOffsetsFunc.
func (b *Broker) consumerOffsets() store.ConsumerOffsets {
	out := b.core.OffsetsByTopic()
	b.consumers.addSubscribed(out)
	if p, ok := b.core.Scheduler().(progressReporter); ok {
		for topic, byID := range p.Progress() {
			groups := out[topic]
			if groups == nil {
				groups = map[string]map[int32]int64{}
				out[topic] = groups
			}
			groups[scheduleProgressGroup] = byID
		}
	}
	return out
}

// addSubscribed adds to out every (topic, group) an online consumer
// subscribes to, with no offsets if the group has none on the topic.
func (m *consumerManager) addSubscribed(out store.ConsumerOffsets) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, g := range m.groups {
		for topic := range g.subs {
			groups := out[topic]
			if groups == nil {
				groups = map[string]map[int32]int64{}
				out[topic] = groups
			}
			if groups[name] == nil {
				groups[name] = map[int32]int64{}
			}
		}
	}
}
