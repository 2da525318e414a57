package config

import (
	"strings"
	"testing"
	"time"
)

// TestKafkaConsumerGroupTimings: the two KIP-848 timings are read in
// milliseconds and validated (the heartbeat interval below the session
// timeout).
func TestKafkaConsumerGroupTimings(t *testing.T) {
	b := Default()
	if b.KafkaConsumerGroupSessionTimeout != 45*time.Second || b.KafkaConsumerGroupHeartbeatInterval != 5*time.Second {
		t.Fatalf("defaults %v / %v, want Kafka's 45 s / 5 s", b.KafkaConsumerGroupSessionTimeout, b.KafkaConsumerGroupHeartbeatInterval)
	}
	if err := b.Set("kafkaConsumerGroupSessionTimeoutMs", "60000"); err != nil || b.KafkaConsumerGroupSessionTimeout != time.Minute {
		t.Fatalf("set session timeout: %v, %v", err, b.KafkaConsumerGroupSessionTimeout)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("valid timings refused: %v", err)
	}
	for _, tc := range []struct {
		session, heartbeat time.Duration
		key                string
	}{
		{500 * time.Millisecond, 100 * time.Millisecond, "kafkaConsumerGroupSessionTimeoutMs"},
		{time.Hour, 5 * time.Second, "kafkaConsumerGroupSessionTimeoutMs"},
		{10 * time.Second, 10 * time.Second, "kafkaConsumerGroupHeartbeatIntervalMs"},
		{10 * time.Second, 50 * time.Millisecond, "kafkaConsumerGroupHeartbeatIntervalMs"},
	} {
		b := Default()
		b.KafkaConsumerGroupSessionTimeout, b.KafkaConsumerGroupHeartbeatInterval = tc.session, tc.heartbeat
		if err := b.Validate(); err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("session %v, heartbeat %v: %v, want an error naming %s", tc.session, tc.heartbeat, err, tc.key)
		}
	}
}
