package broker

// Read-only accessors for the metrics' RocketMQ-compatible names
// (rocketmq-exporter labels series by cluster, broker and address, and
// consumer groups by their online member count and message model).

// Identity returns the broker's cluster name, broker name and advertised
// address.
func (b *Broker) Identity() (cluster, name, addr string) {
	return b.cfg.ClusterName, b.cfg.BrokerName, b.cfg.AdvertisedAddr
}

// GroupMembers returns how many members of a consumer group are online and
// the group's message model (CLUSTERING or BROADCASTING; "" with none
// online).
func (b *Broker) GroupMembers(group string) (online int, messageModel string) {
	online, messageModel = b.core.Consumers().Members(group)
	if n := len(b.kafkaMembers(group)); n > 0 { // a Kafka group's members (admin_kafka.go)
		online += n
		if messageModel == "" {
			messageModel = "CLUSTERING"
		}
	}
	return online, messageModel
}
