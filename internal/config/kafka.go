package config

import (
	"net"
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
	if b.KafkaRetentionCheckInterval < time.Second {
		bad("kafkaRetentionCheckIntervalMs", "must be at least 1000 (one second)")
	}
	if b.KafkaAdvertisedListen != "" {
		if _, _, err := net.SplitHostPort(b.KafkaAdvertisedListen); err != nil {
			bad("kafkaAdvertisedListen", "not host:port")
		}
	}
}
