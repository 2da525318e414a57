package broker

import (
	"encoding/json"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

func kafkaTopic(cl *client, topic, op, queues string, attrs map[string]string) *remoting.Command {
	var data []byte
	if attrs != nil {
		data, _ = json.Marshal(KafkaTopic{Attributes: attrs})
	}
	return cl.invoke(remoting.ReqKafkaTopic, map[string]string{"topic": topic, "op": op, "queues": queues}, data)
}

// TestKafkaTopic: KEEL_KAFKA_TOPIC creates a topic absent here with its
// Kafka configs, refuses one that exists (KEEL_TOPIC_EXISTS) and
// attributes that are no Kafka config; grow raises the queue count
// keeping the configs, never lowers it; a slave refuses it.
func TestKafkaTopic(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, kafkaTopic(cl, "K", "create", "3", map[string]string{"kafka.retention.ms": "1000"}), remoting.ResSuccess)
	tc, ok := e.b.core.Topic("K")
	if !ok || tc.ReadQueueNums != 3 || tc.WriteQueueNums != 3 || tc.Attributes["kafka.retention.ms"] != "1000" {
		t.Fatalf("K: %+v %v", tc, ok)
	}
	wantCode(t, kafkaTopic(cl, "K", "create", "3", nil), remoting.ResKeelTopicExists)
	wantCode(t, kafkaTopic(cl, "L", "create", "1", map[string]string{"+delete.policy": "x"}), remoting.ResInvalidParameter)
	if _, ok := e.b.core.Topic("L"); ok {
		t.Fatal("L was created with a refused attribute")
	}
	wantCode(t, kafkaTopic(cl, "K", "grow", "5", nil), remoting.ResSuccess)
	if tc, _ := e.b.core.Topic("K"); tc.ReadQueueNums != 5 || tc.WriteQueueNums != 5 || tc.Attributes["kafka.retention.ms"] != "1000" {
		t.Fatalf("K after grow: %+v", tc)
	}
	wantCode(t, kafkaTopic(cl, "K", "grow", "4", nil), remoting.ResInvalidParameter)
	wantCode(t, kafkaTopic(cl, "Nope", "grow", "4", nil), remoting.ResTopicNotExist)
	wantCode(t, kafkaTopic(cl, "K", "shrink", "4", nil), remoting.ResInvalidParameter)

	s := startEnv(t, func(c *Config) { c.BrokerID = 1 })
	wantCode(t, kafkaTopic(s.dial(), "K", "create", "1", nil), remoting.ResSlaveNotAvailable)
}
