package core

// Reading: what a consumer must pass before it reads a queue. The read
// itself is the store's (GetMessage by queue offset, records as stored);
// a read that finds nothing new waits with Hold or WaitForData
// (longpoll.go).

// CheckRead checks that group may read queue queueID of topic: the broker
// and the topic are readable, the group exists (or is created) and may
// consume, and the queue id is below the topic's read queue count. It
// returns the group's configuration.
func (b *Broker) CheckRead(group, topic string, queueID int32) (GroupConfig, error) {
	if b.cfg.BrokerPermission&PermRead == 0 {
		return GroupConfig{}, Errorf(ErrForbidden, "the broker[%s] pulling message is forbidden", b.cfg.BrokerName)
	}
	g, err := b.EnsureGroup(group)
	if err != nil {
		return GroupConfig{}, err
	}
	if !g.ConsumeEnable {
		return GroupConfig{}, Errorf(ErrForbidden, "subscription group no permission, %s", group)
	}
	tc, ok := b.topics.get(topic)
	if !ok {
		return GroupConfig{}, Errorf(ErrTopicNotFound, "topic[%s] not exist, apply first please!", topic)
	}
	if !tc.Readable() {
		return GroupConfig{}, Errorf(ErrForbidden, "the topic[%s] pulling message is forbidden", topic)
	}
	if queueID < 0 || queueID >= tc.ReadQueueNums {
		return GroupConfig{}, Errorf(ErrInvalidArgument, "queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d]",
			queueID, topic, tc.ReadQueueNums)
	}
	return g, nil
}
