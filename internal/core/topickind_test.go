package core

import (
	"testing"

	"github.com/keelmq/keel/internal/message"
)

// The broker's own topics must count as system topics wherever topics are
// counted (message.KindOfTopic), so the console, the admin client and the
// keel_topics gauge agree on what a user topic is.
func TestBrokerTopicsAreSystemKind(t *testing.T) {
	names := []string{timerTopic, sysTopicPrefix + "x"}
	for n := range systemTopics {
		names = append(names, n)
	}
	for n := range notSendableTopics {
		names = append(names, n)
	}
	for _, n := range names {
		if k := message.KindOfTopic(n); k != message.TopicSystem {
			t.Errorf("KindOfTopic(%q) = %q, want system", n, k)
		}
	}
	if k := message.KindOfTopic(RetryTopic("g")); k != message.TopicRetry {
		t.Errorf("retry topic kind %q", k)
	}
	if k := message.KindOfTopic(DLQTopic("g")); k != message.TopicDLQ {
		t.Errorf("DLQ topic kind %q", k)
	}
}
