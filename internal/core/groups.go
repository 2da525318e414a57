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
func (b *Broker) Group(name string) (GroupConfig, bool) { return b.groups.get(name) }

// EnsureGroup returns the group's configuration, creating it if allowed.
func (b *Broker) EnsureGroup(name string) (GroupConfig, error) {
	if g, ok := b.groups.get(name); ok {
		return g, nil
	}
	if !b.cfg.AutoCreateSubscriptionGroup {
		return GroupConfig{}, Errorf(ErrGroupNotFound, "subscription group [%s] does not exist", name)
	}
	g, created, err := b.groups.createIfAbsent(name, b.NewGroupConfig(name))
	if err != nil {
		return GroupConfig{}, err
	}
	if created {
		b.log.Info("subscription group created", "group", name)
	}
	return g, nil
}

// UpdateGroup creates or replaces a group's configuration (an operator's
// request): the name must make a valid retry topic, the retry queue count
// be in [0, MaxQueueNums] and retryMaxTimes not negative.
func (b *Broker) UpdateGroup(g GroupConfig) error {
	if g.GroupName == "" || len(RetryTopic(g.GroupName)) > 127 {
		return Errorf(ErrInvalidArgument, "bad subscription group name %q", g.GroupName)
	}
	if g.RetryQueueNums < 0 || g.RetryQueueNums > b.cfg.MaxQueueNums || g.RetryMaxTimes < 0 {
		return Errorf(ErrInvalidArgument, "bad retry settings %d/%d", g.RetryQueueNums, g.RetryMaxTimes)
	}
	if err := b.groups.put(g.GroupName, g); err != nil {
		return err
	}
	b.log.Info("subscription group updated", "group", g.GroupName)
	return nil
}

// DeleteGroup drops a group's configuration and its committed offsets.
func (b *Broker) DeleteGroup(group string) error {
	if _, err := b.groups.remove(group); err != nil {
		return err
	}
	b.offsets.deleteGroup(group)
	b.log.Info("subscription group deleted", "group", group)
	return nil
}

// GroupTable returns every subscription group configuration and the
// table's version.
func (b *Broker) GroupTable() (map[string]GroupConfig, DataVersion) { return b.groups.all() }
