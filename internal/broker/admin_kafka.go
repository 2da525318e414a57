package broker

// LIST_KAFKA (Keel's request code 10404, no ext fields) answers what the
// Kafka front door beside this broker holds, as JSON:
//
//	{"broker":"broker-a","enabled":true,"info":{
//	 "groups":[{"group":"billing","state":"Stable","members":[{"memberId":...,
//	   "clientId":"billing-1","host":"10.0.0.7","assignment":[{"topic":"orders","partitions":[0,1]}]}]}],
//	 "connections":[{"remote":"10.0.0.7:50412","clientId":"billing-1",...}]}}
//
// and GET_CONSUMER_CONNECTION_LIST counts a Kafka group's members as the
// group's online consumers (language OTHER, CLUSTERING, consuming
// actively: Kafka consumers fetch), so `keel group`, the console and the
// metrics see them. The broker does not import the Kafka package (front
// doors never import one another): the wiring installs KafkaHooks.
// Read-only.

import (
	"context"
	"encoding/json"

	"github.com/keelmq/keel/internal/remoting"
)

// KafkaMember is a member of a Kafka consumer group: its member id, the
// host it connects from and the topics it was assigned.
type KafkaMember struct {
	ID     string
	Host   string
	Topics []string
}

// KafkaHooks are what the Kafka front door tells the broker.
type KafkaHooks struct {
	// Info returns the door's groups and connections, JSON-encodable.
	Info func() any
	// Members returns the members of a Kafka group (none: nil).
	Members func(group string) []KafkaMember
	// Counts returns the Kafka groups with a member online and their
	// members, which Stats adds to the RocketMQ consumers'.
	Counts func() (groups, members int)
}

// SetKafka installs the Kafka front door's hooks (nil removes them).
func (b *Broker) SetKafka(h *KafkaHooks) { b.kafka.Store(h) }

func (b *Broker) kafkaMembers(group string) []KafkaMember {
	if h := b.kafka.Load(); h != nil && h.Members != nil {
		return h.Members(group)
	}
	return nil
}

// addKafkaMembers adds a Kafka group's members to cc; false if there are
// none.
func addKafkaMembers(cc *consumerConnection, ms []KafkaMember) bool {
	if len(ms) == 0 {
		return false
	}
	if cc.MessageModel == "" {
		cc.MessageModel, cc.ConsumeType, cc.ConsumeFromWhere = "CLUSTERING", "CONSUME_ACTIVELY", "CONSUME_FROM_LAST_OFFSET"
	}
	if cc.SubscriptionTable == nil {
		cc.SubscriptionTable = map[string]subscriptionInfo{}
	}
	for _, m := range ms {
		cc.ConnectionSet = append(cc.ConnectionSet, connectionInfo{ClientAddr: m.Host, ClientID: m.ID, Language: "OTHER"})
		for _, t := range m.Topics {
			if _, ok := cc.SubscriptionTable[t]; !ok {
				cc.SubscriptionTable[t] = subscriptionInfo{Topic: t, SubString: "*", ExpressionType: "TAG", TagsSet: []string{}, CodeSet: []int64{}}
			}
		}
	}
	return true
}

type kafkaReport struct {
	Broker  string `json:"broker"`
	Enabled bool   `json:"enabled"`
	Info    any    `json:"info,omitempty"`
}

func (b *Broker) handleListKafka(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	rep := kafkaReport{Broker: b.cfg.BrokerName}
	if h := b.kafka.Load(); h != nil && h.Info != nil {
		rep.Enabled, rep.Info = true, h.Info()
	}
	body, err := json.Marshal(rep)
	if err != nil {
		return req.NewResponse(remoting.ResSystemError, err.Error()), nil
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}
