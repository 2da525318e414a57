package broker

// The broker's view of the core (internal/core): the metadata the RocketMQ
// requests read and change is the core's, and so are the names of topics.
// The exported functions here keep the broker's API for its callers.

import (
	"net/netip"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/store"
)

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

// CoreConfig is the core's part of a broker configuration (defaults
// applied, validated): the configuration of the core a broker built with
// New makes, and of the one cmd/keel makes and shares between the front
// doors.
func CoreConfig(c Config) (core.Config, error) {
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return core.Config{}, err
	}
	return core.Config{
		ClusterName: c.ClusterName, BrokerName: c.BrokerName, StoreHost: storeHost(c.AdvertisedAddr),
		BrokerPermission: c.BrokerPermission, MaxMessageSize: c.MaxMessageSize,
		DataDir: c.DataDir, FS: c.FS,
		AutoCreateTopicEnable: c.AutoCreateTopicEnable, AutoCreateSubscriptionGroup: c.AutoCreateSubscriptionGroup,
		DefaultTopicQueueNums: c.DefaultTopicQueueNums, MaxQueueNums: c.MaxQueueNums,
		MaxTopics: c.MaxTopics, MaxGroups: c.MaxGroups, RetryMaxTimes: c.RetryMaxTimes,
		YoungQueueBytes: c.YoungQueueBytes, MaxWaits: c.MaxHeldPulls,
		LockExpiry: c.LockExpiry, OffsetFlushInterval: c.OffsetFlushInterval,
		SystemRecords: c.SystemRecords,
		Now:           c.Now,
	}, nil
}

// Core returns the protocol-free core the broker serves.
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

// Store returns the broker's message store.
func (b *Broker) Store() *store.Store { return b.core.Store() }

// StoreHost is the advertised address stamped on stored messages.
func (b *Broker) StoreHost() netip.AddrPort { return b.storeHost }

// Scheduler holds messages until they are due (core.Scheduler).
type Scheduler = core.Scheduler

// Deduplicator suppresses re-sends of a stored message (core.Deduplicator).
type Deduplicator = core.Deduplicator

// Transactions stores half messages and decides them (core.Transactions).
type Transactions = core.Transactions

// SetScheduler installs the scheduled-delivery engine (nil removes it).
func (b *Broker) SetScheduler(s Scheduler) { b.core.SetScheduler(s) }

// SetTransactions installs the transaction engine (nil removes it).
func (b *Broker) SetTransactions(t Transactions) { b.core.SetTransactions(t) }

// SetDeduplicator installs the de-duplication hook (nil removes it).
func (b *Broker) SetDeduplicator(d Deduplicator) { b.core.SetDeduplicator(d) }
