package acl

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keelmq/keel/internal/remoting"
)

// RetryPrefix marks a consumer group's retry topic; ACL treats a topic
// "%RETRY%G" as the group G.
const RetryPrefix = "%RETRY%"

// traceTopic may be published to by any authenticated account (RocketMQ
// skips the permission check for it so message tracing works).
const traceTopic = "RMQ_SYS_TRACE_TOPIC"

// resource is one topic or group a request touches and the permission it
// needs there.
type resource struct {
	name  string
	group bool
	perm  Perm
}

func (r resource) String() string {
	if r.group {
		return "group " + r.name
	}
	return "topic " + r.name
}

// adminCodes need an admin account (RocketMQ's Permission.ADMIN_CODE).
var adminCodes = map[int16]bool{
	remoting.ReqUpdateAndCreateTopic:        true,
	remoting.ReqUpdateBrokerConfig:          true,
	remoting.ReqDeleteTopicInBroker:         true,
	remoting.ReqKafkaTopic:                  true,
	remoting.ReqUpdateAndCreateSubscription: true,
	remoting.ReqDeleteSubscriptionGroup:     true,
}

// needs lists what req touches. Codes not listed need only a valid
// signature from a known account (as in RocketMQ).
func needs(req *remoting.Command) ([]resource, error) {
	var rs resources
	ext := req.ExtFields
	switch req.Code {
	case remoting.ReqSendMessage, remoting.ReqSendMessageV2, remoting.ReqSendBatchMessage,
		remoting.ReqSendReplyMessage, remoting.ReqSendReplyMessageV2:
		// The V1 header names the topic "topic", V2 "b". Both are checked
		// when present, whichever one the broker reads.
		for _, k := range []string{"topic", "b"} {
			if t, ok := ext[k]; ok {
				rs.topic(t, Pub)
			}
		}
	case remoting.ReqPullMessage:
		rs.topic(ext["topic"], Sub)
		rs.group(ext["consumerGroup"], Sub)
	case remoting.ReqQueryMessage:
		rs.topic(ext["topic"], Sub)
	case remoting.ReqQueryConsumerOffset, remoting.ReqUpdateConsumerOffset, remoting.ReqKafkaGroupOffsets:
		rs.group(ext["consumerGroup"], Sub)
		rs.topic(ext["topic"], Sub)
	case remoting.ReqSearchOffsetByTimestamp, remoting.ReqGetMaxOffset,
		remoting.ReqGetMinOffset, remoting.ReqGetEarliestMsgStoretime:
		rs.topic(ext["topic"], Any)
	case remoting.ReqConsumerSendMsgBack:
		rs.group(ext["group"], Sub)
	case remoting.ReqUnregisterClient, remoting.ReqGetConsumerListByGroup:
		rs.group(ext["consumerGroup"], Sub)
	case remoting.ReqHeartBeat:
		return rs.list, rs.heartbeat(req.Body)
	case remoting.ReqLockBatchMQ, remoting.ReqUnlockBatchMQ:
		return rs.list, rs.lockBody(req.Body)
	}
	return rs.list, nil
}

type resources struct{ list []resource }

// topic adds a topic; a retry topic "%RETRY%G" is the group G (SUB). Empty
// names add nothing (the broker rejects the request itself).
func (rs *resources) topic(name string, p Perm) {
	if g, ok := strings.CutPrefix(name, RetryPrefix); ok {
		rs.group(g, Sub)
		return
	}
	if name != "" {
		rs.list = append(rs.list, resource{name: name, perm: p})
	}
}

func (rs *resources) group(name string, p Perm) {
	if name != "" {
		rs.list = append(rs.list, resource{name: name, group: true, perm: p})
	}
}

// heartbeat: each consumer group needs SUB, and each topic it subscribes.
// The body is read with the same field names as the broker reads it.
func (rs *resources) heartbeat(body []byte) error {
	var hb struct {
		ConsumerDataSet []struct {
			GroupName           string `json:"groupName"`
			SubscriptionDataSet []struct {
				Topic string `json:"topic"`
			} `json:"subscriptionDataSet"`
		} `json:"consumerDataSet"`
	}
	if err := json.Unmarshal(body, &hb); err != nil {
		return fmt.Errorf("heartbeat body: %v", err)
	}
	for _, cd := range hb.ConsumerDataSet {
		rs.group(cd.GroupName, Sub)
		for _, sd := range cd.SubscriptionDataSet {
			rs.topic(sd.Topic, Sub)
		}
	}
	return nil
}

// lockBody: locking queues for orderly consumption needs SUB on the group
// and the topics (a Keel addition; RocketMQ checks nothing here).
func (rs *resources) lockBody(body []byte) error {
	var lb struct {
		ConsumerGroup string `json:"consumerGroup"`
		MQSet         []struct {
			Topic string `json:"topic"`
		} `json:"mqSet"`
	}
	if err := json.Unmarshal(body, &lb); err != nil {
		return fmt.Errorf("lock body: %v", err)
	}
	rs.group(lb.ConsumerGroup, Sub)
	for _, mq := range lb.MQSet {
		rs.topic(mq.Topic, Sub)
	}
	return nil
}
