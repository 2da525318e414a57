package broker

// The broker's view of the core (internal/core): the metadata the RocketMQ
// requests read and change is the core's, and so are the names of topics.
// The exported functions here keep the broker's API for its callers.

import "github.com/keelmq/keel/internal/core"

// DefaultTopic is the template topic producers name when sending to a topic
// that does not exist yet (auto-creation).
const DefaultTopic = core.DefaultTopic

// TopicConfig is one topic's configuration.
type TopicConfig = core.TopicConfig

// GroupConfig is one consumer group's configuration.
type GroupConfig = core.GroupConfig

// RetryTopic is the retry topic of a consumer group.
func RetryTopic(group string) string { return core.RetryTopic(group) }

// DLQTopic is the dead-letter topic of a consumer group.
func DLQTopic(group string) string { return core.DLQTopic(group) }

// coreConfig is the core's part of the broker's configuration.
func (b *Broker) coreConfig() core.Config {
	c := b.cfg
	return core.Config{
		DataDir: c.DataDir, FS: c.FS,
		AutoCreateTopicEnable: c.AutoCreateTopicEnable, AutoCreateSubscriptionGroup: c.AutoCreateSubscriptionGroup,
		DefaultTopicQueueNums: c.DefaultTopicQueueNums, MaxQueueNums: c.MaxQueueNums,
		MaxTopics: c.MaxTopics, MaxGroups: c.MaxGroups, RetryMaxTimes: c.RetryMaxTimes,
		YoungQueueBytes: c.YoungQueueBytes,
		OnTopicsChanged: b.reg.kick,
		Now:             c.Now,
	}
}

// Core returns the protocol-free core the broker serves (for other front
// doors on the same store).
func (b *Broker) Core() *core.Broker { return b.core }

// Topic returns the configuration of a topic.
func (b *Broker) Topic(name string) (TopicConfig, bool) { return b.core.Topic(name) }

// Topics returns all topic configurations sorted by name.
func (b *Broker) Topics() []TopicConfig { return b.core.Topics() }

// EnsureTopic creates a topic with the given queue count and permission
// unless it exists (see core.Broker.EnsureTopic).
func (b *Broker) EnsureTopic(name string, queues, perm int32) (TopicConfig, error) {
	return b.core.EnsureTopic(name, queues, perm)
}

// Group returns a consumer group's configuration.
func (b *Broker) Group(name string) (GroupConfig, bool) { return b.core.Group(name) }
