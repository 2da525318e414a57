package core

// Subscription group configuration (RocketMQ SubscriptionGroupConfig):
// whether a group may consume, its retry queue count and maximum reconsume
// times. Persisted crash-safely as <DataDir>/config/subscriptionGroup.json.
// Groups are created on heartbeat, pull and send-back when
// AutoCreateSubscriptionGroup is set; otherwise an unknown group is
// ErrGroupNotFound.

// GroupConfig is one consumer group's configuration.
type GroupConfig struct {
	GroupName                      string `json:"groupName"`
	ConsumeEnable                  bool   `json:"consumeEnable"`
	ConsumeFromMinEnable           bool   `json:"consumeFromMinEnable"`
	ConsumeBroadcastEnable         bool   `json:"consumeBroadcastEnable"`
	RetryQueueNums                 int32  `json:"retryQueueNums"`
	RetryMaxTimes                  int32  `json:"retryMaxTimes"`
	BrokerID                       int64  `json:"brokerId"`
	WhichBrokerWhenConsumeSlowly   int64  `json:"whichBrokerWhenConsumeSlowly"`
	NotifyConsumerIDsChangedEnable bool   `json:"notifyConsumerIdsChangedEnable"`
}

// NewGroupConfig returns the configuration a group gets when it is
// created without one: RocketMQ's defaults.
func (b *Broker) NewGroupConfig(name string) GroupConfig {
	return GroupConfig{
		GroupName: name, ConsumeEnable: true, ConsumeFromMinEnable: true, ConsumeBroadcastEnable: true,
		RetryQueueNums: 1, RetryMaxTimes: b.cfg.RetryMaxTimes, WhichBrokerWhenConsumeSlowly: 1,
		NotifyConsumerIDsChangedEnable: true,
	}
}

// Group returns a consumer group's configuration.
func (b *Broker) Group(name string) (GroupConfig, bool) {
	if g, ok := b.groups.get(name); ok {
		return g, true
	}
	return b.unsaved.get(name) // diskfull.go
}

// EnsureGroup returns the group's configuration, creating it if allowed.
func (b *Broker) EnsureGroup(name string) (GroupConfig, error) {
	if g, ok := b.Group(name); ok {
		return g, nil
	}
	if !b.cfg.AutoCreateSubscriptionGroup {
		return GroupConfig{}, Errorf(ErrGroupNotFound, "subscription group [%s] does not exist", name)
	}
	g, created, err := b.groups.createIfAbsent(name, b.NewGroupConfig(name))
	if err != nil {
		return b.keepUnsavedGroup(name, b.NewGroupConfig(name), err) // a full disk fails no read
	}
	if created {
		b.log.Info("subscription group created", "group", name)
	}
	return g, nil
}
