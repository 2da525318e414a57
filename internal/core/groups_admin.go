package core

// Operator changes to the subscription groups (RocketMQ's
// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP and DELETE_SUBSCRIPTIONGROUP) and
// the table as a whole.

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
	if err := b.offsets.deleteGroup(group); err != nil {
		b.log.Warn("group's offsets deleted; the record of it is not confirmed", "group", group, "err", err)
	}
	b.log.Info("subscription group deleted", "group", group)
	return nil
}

// GroupTable returns every subscription group configuration and the
// table's version.
func (b *Broker) GroupTable() (map[string]GroupConfig, DataVersion) { return b.groups.all() }
