package kafka

// The consumer offsets topic: Kafka keeps committed offsets in an
// internal topic, __consumer_offsets, which tools list and some read.
// Keel keeps them in the broker's offset table (internal/core), shared
// with RocketMQ consumers, so that topic does not exist here and is not
// made up: Metadata and ListTopics never list it, a Metadata naming it
// is answered UNKNOWN_TOPIC_OR_PARTITION, or INVALID_TOPIC_EXCEPTION (17)
// where it would be created, as is a CreateTopics, nothing is created,
// and the offsets it would hold are read with
// OffsetFetch, ListGroups and DescribeGroups (kafka-consumer-groups.sh,
// kadm's FetchOffsets and Lag). A topic of that name made through the
// RocketMQ door is an ordinary topic.

import "github.com/keelmq/keel/internal/core"

// consumerOffsetsTopic is Kafka's internal topic of committed offsets.
const consumerOffsetsTopic = "__consumer_offsets"

// checkNotInternal refuses to create Kafka's internal offsets topic.
func checkNotInternal(name string) error {
	if name == consumerOffsetsTopic {
		return core.Errorf(core.ErrInvalidArgument, "%s is Kafka's internal topic of committed offsets: Keel keeps them in the broker's offset table (read them with OffsetFetch), not in a topic", name)
	}
	return nil
}
