package config

import "net"

// DefaultKafkaListen is loopback: the Kafka listener has no authentication
// yet (no SASL), so it does not face the network unless asked to.
const DefaultKafkaListen = "127.0.0.1:9092"

// validateKafka checks the Kafka listener's addresses, and refuses one
// beyond loopback with aclEnable=true: Kafka clients would bypass the ACL.
func (b *Broker) validateKafka(bad func(string, string, ...any)) {
	if b.KafkaListen != "" {
		host, _, err := net.SplitHostPort(b.KafkaListen)
		switch {
		case err != nil:
			bad("kafkaListen", "not host:port")
		case b.ACLEnable && !isLoopback(host):
			bad("kafkaListen", "the Kafka listener has no authentication yet, so with aclEnable=true it may listen on loopback only (127.0.0.1:9092), or set it empty to turn it off")
		}
	}
	if b.KafkaAdvertisedListen != "" {
		if _, _, err := net.SplitHostPort(b.KafkaAdvertisedListen); err != nil {
			bad("kafkaAdvertisedListen", "not host:port")
		}
	}
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
