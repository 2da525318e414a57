package config

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestKafkaListen: loopback by default, empty turns it off; with
// aclEnable=true any address is allowed (Kafka clients authenticate with
// SASL as the ACL's accounts).
func TestKafkaListen(t *testing.T) {
	if d := Default(); d.KafkaListen != "127.0.0.1:9092" || d.Validate() != nil {
		t.Fatalf("default kafkaListen %q: %v", d.KafkaListen, d.Validate())
	}
	for _, c := range []struct {
		listen string
		acl    bool
		bad    string
	}{
		{"", true, ""},
		{":9092", false, ""},
		{"127.0.0.1:9092", true, ""},
		{"[::1]:9092", true, ""},
		{":9092", true, ""},
		{"10.0.0.1:9092", true, ""},
		{"9092", false, "not host:port"},
	} {
		b := Default()
		b.KafkaListen, b.ACLEnable = c.listen, c.acl
		b.ACLFile = "plain_acl.yml"
		err := b.validateKafkaOnly()
		if c.bad == "" && err != nil || c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)) {
			t.Errorf("kafkaListen=%q aclEnable=%v: %v, want %q", c.listen, c.acl, err, c.bad)
		}
	}
}

func (b *Broker) validateKafkaOnly() error {
	var first error
	b.validateKafka(func(key, format string, args ...any) {
		if first == nil {
			first = b.valueError(key, fmt.Errorf(format, args...))
		}
	})
	return first
}

// TestKafkaProducerIDExpiration: 24 h by default, at least a second.
func TestKafkaProducerIDExpiration(t *testing.T) {
	b := Default()
	if b.KafkaProducerIDExpiration != 24*time.Hour || b.validateKafkaOnly() != nil {
		t.Fatalf("default %v: %v", b.KafkaProducerIDExpiration, b.validateKafkaOnly())
	}
	b.KafkaProducerIDExpiration = 500 * time.Millisecond
	if err := b.validateKafkaOnly(); err == nil || !strings.Contains(err.Error(), "kafkaProducerIdExpirationMs") {
		t.Fatalf("500 ms: %v, want refused", err)
	}
}

// TestKafkaRetentionCheckInterval: 5 min by default, at least a second.
func TestKafkaRetentionCheckInterval(t *testing.T) {
	b := Default()
	if b.KafkaRetentionCheckInterval != 5*time.Minute || b.validateKafkaOnly() != nil {
		t.Fatalf("default %v: %v", b.KafkaRetentionCheckInterval, b.validateKafkaOnly())
	}
	b.KafkaRetentionCheckInterval = 999 * time.Millisecond
	if err := b.validateKafkaOnly(); err == nil || !strings.Contains(err.Error(), "kafkaRetentionCheckIntervalMs") {
		t.Fatalf("999 ms: %v, want refused", err)
	}
}

// TestKafkaCompactionInterval: 15 s by default, at least 10 ms.
func TestKafkaCompactionInterval(t *testing.T) {
	b := Default()
	if b.KafkaCompactionInterval != 15*time.Second || b.validateKafkaOnly() != nil {
		t.Fatalf("default %v: %v", b.KafkaCompactionInterval, b.validateKafkaOnly())
	}
	b.KafkaCompactionInterval = 9 * time.Millisecond
	if err := b.validateKafkaOnly(); err == nil || !strings.Contains(err.Error(), "kafkaCompactionIntervalMs") {
		t.Fatalf("9 ms: %v, want refused", err)
	}
}
