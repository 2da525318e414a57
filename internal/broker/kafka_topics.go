package broker

// KEEL_KAFKA_TOPIC (Keel's request 10451): the Kafka door of another
// broker group spreads a topic it creates over the cluster's groups, or
// raises a spread topic's queue count (internal/kafka/topics.go). Ext
// fields: topic; queues (read and write); op, one of
//
//	create  the topic, absent here, with that many queues and the Kafka
//	        topic configs of the body ({"attributes":{...}}, Kafka configs
//	        only, the keys as the topic's attributes keep them); a topic that exists here
//	        is refused (TOPIC_EXIST_ALREADY, Keel's 10452)
//	grow    an existing topic's queue count raised to queues (never
//	        lowered: INVALID_PARAMETER), its other settings kept
//
// Only a master answers (a slave: SLAVE_NOT_AVAILABLE). The change is
// written as any topic change (topics.json, and a system record on a
// master serving slaves) before the answer. Undoing a create is
// DELETE_TOPIC_IN_BROKER.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

// KafkaTopic is the body of KEEL_KAFKA_TOPIC.
type KafkaTopic struct {
	Attributes map[string]string `json:"attributes,omitempty"`
}

func (b *Broker) handleKafkaTopic(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	topic, op := e.required("topic"), e.required("op")
	queues := e.int32("queues", 0, true)
	if e.err != nil {
		return nil, e.err
	}
	if b.cfg.BrokerID != 0 {
		return req.NewResponse(remoting.ResSlaveNotAvailable, "a slave creates no topics: ask the master"), nil
	}
	var body KafkaTopic
	if len(req.Body) > 0 {
		if err := json.Unmarshal(req.Body, &body); err != nil {
			return req.NewResponse(remoting.ResInvalidParameter, "body: "+err.Error()), nil
		}
	}
	tc, exists := b.core.Topic(topic)
	switch op {
	case "create":
		if exists {
			return req.NewResponse(remoting.ResKeelTopicExists, "topic "+topic+" already exists on "+b.cfg.BrokerName), nil
		}
		tc = core.NewTopicConfig(topic, queues, core.PermRW)
		for k, v := range body.Attributes {
			if !strings.HasPrefix(k, core.KafkaAttributePrefix) {
				return req.NewResponse(remoting.ResInvalidParameter, "attribute "+k+" is not a Kafka topic config"), nil
			}
			tc.Attributes[k] = v
		}
	case "grow":
		if !exists {
			return nil, core.Errorf(core.ErrTopicNotFound, "topic[%s] not exist", topic)
		}
		if queues < tc.ReadQueueNums || queues < tc.WriteQueueNums {
			return req.NewResponse(remoting.ResInvalidParameter, fmt.Sprintf("topic %s has %d queues here: the count only grows", topic, tc.ReadQueueNums)), nil
		}
		tc.ReadQueueNums, tc.WriteQueueNums = queues, queues
	default:
		return req.NewResponse(remoting.ResInvalidParameter, fmt.Sprintf("op %q: want create or grow", op)), nil
	}
	if err := b.core.UpdateKafkaTopic(tc); err != nil {
		return nil, err
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}
