package config

import (
	"math"
	"net"
	"strings"
	"time"
)

// DefaultKafkaListen is loopback: without aclEnable=true the Kafka
// listener authenticates nobody, so it does not face the network unless
// asked to (with aclEnable=true Kafka clients authenticate with SASL as
// plain_acl.yml accounts; listen on all interfaces with ":9092").
const DefaultKafkaListen = "127.0.0.1:9092"

// validateKafka checks the Kafka listener's addresses.
func (b *Broker) validateKafka(bad func(string, string, ...any)) {
	if b.KafkaListen != "" {
		if _, _, err := net.SplitHostPort(b.KafkaListen); err != nil {
			bad("kafkaListen", "not host:port")
		}
	}
	if b.KafkaProducerIDExpiration < time.Second {
		bad("kafkaProducerIdExpirationMs", "must be at least 1000 (one second)")
	}
	if b.KafkaGroupInitialRebalanceDelay < 0 || b.KafkaGroupInitialRebalanceDelay > 5*time.Minute {
		bad("kafkaGroupInitialRebalanceDelayMs", "must be between 0 and 300000 (five minutes)")
	}
	if b.KafkaConsumerGroupSessionTimeout < time.Second || b.KafkaConsumerGroupSessionTimeout > 30*time.Minute {
		bad("kafkaConsumerGroupSessionTimeoutMs", "must be between 1000 and 1800000 (30 minutes)")
	}
	if b.KafkaConsumerGroupHeartbeatInterval < 100*time.Millisecond || b.KafkaConsumerGroupHeartbeatInterval >= b.KafkaConsumerGroupSessionTimeout {
		bad("kafkaConsumerGroupHeartbeatIntervalMs", "must be at least 100 and below kafkaConsumerGroupSessionTimeoutMs")
	}
	if b.KafkaRetentionCheckInterval < time.Second {
		bad("kafkaRetentionCheckIntervalMs", "must be at least 1000 (one second)")
	}
	if b.KafkaCompactionInterval < 10*time.Millisecond {
		bad("kafkaCompactionIntervalMs", "must be at least 10")
	}
	if b.KafkaNodeID < -1 || b.KafkaNodeID > math.MaxInt32 {
		bad("kafkaNodeId", "must be -1 (the brokerId) or between 0 and 2147483647")
	}
	if b.KafkaNodeID == -1 && b.BrokerID > math.MaxInt32 {
		bad("kafkaNodeId", "must be set: the brokerId is above 2147483647, the largest Kafka node id")
	}
	if len(b.KafkaBrokerRack) > 64 || strings.ContainsAny(b.KafkaBrokerRack, ",\n\r") {
		bad("kafkaBrokerRack", "at most 64 characters, no comma or line break")
	}
	if b.KafkaAdvertisedListen != "" {
		if _, _, err := net.SplitHostPort(b.KafkaAdvertisedListen); err != nil {
			bad("kafkaAdvertisedListen", "not host:port")
		}
	}
}

// KafkaNode is the broker's Kafka node id: kafkaNodeId, or the brokerId
// when it is -1 (so a single broker is node 0, and the members of one
// group are nodes 0, 1, ... as their brokerIds). The NameServer refuses
// a broker whose node id another live broker of the cluster holds, so
// a cluster of several groups sets kafkaNodeId on every member.
func (b *Broker) KafkaNode() int32 {
	if b.KafkaNodeID >= 0 {
		return int32(b.KafkaNodeID)
	}
	return int32(b.BrokerID)
}
