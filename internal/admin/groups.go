package admin

// Consumer groups: list (GET_ALL_SUBSCRIPTIONGROUP_CONFIG of every master)
// and describe — per queue the broker offset, the group's consumer offset and
// the lag between them (GET_CONSUME_STATS), the online members and their
// subscriptions (GET_CONSUMER_CONNECTION_LIST), and the dead-letter count.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/keelmq/keel/internal/remoting"
)

// GroupConfig is a subscription group's configuration on a broker.
type GroupConfig struct {
	Group                  string `json:"groupName"`
	ConsumeEnable          bool   `json:"consumeEnable"`
	ConsumeBroadcastEnable bool   `json:"consumeBroadcastEnable"`
	RetryQueueNums         int32  `json:"retryQueueNums"`
	RetryMaxTimes          int32  `json:"retryMaxTimes"`
}

// QueueLag is one queue's consume progress for a group.
type QueueLag struct {
	Topic          string `json:"topic"`
	Broker         string `json:"broker"`
	QueueID        int32  `json:"queueId"`
	BrokerOffset   int64  `json:"brokerOffset"`
	ConsumerOffset int64  `json:"consumerOffset"`
	Lag            int64  `json:"lag"`
	LastTimestamp  int64  `json:"lastTimestamp,omitempty"` // store time of the last consumed message
	// ConsumedAt is when the group's offset on the queue last moved forward
	// (Unix ms, the broker's clock; 0 if not since the broker started, or
	// from a broker that does not report it).
	ConsumedAt int64 `json:"consumedAt,omitempty"`
	// OldestUnconsumed is the store time of the first message the group has
	// not consumed (Unix ms; 0 when caught up).
	OldestUnconsumed int64 `json:"oldestUnconsumed,omitempty"`
}

// Member is one online consumer client.
type Member struct {
	ClientID   string `json:"clientId"`
	ClientAddr string `json:"clientAddr"`
	Language   string `json:"language"`
	Version    int    `json:"version"`
}

// Group summarizes a consumer group.
type Group struct {
	Name           string `json:"group"`
	Members        int    `json:"members"`
	MessageModel   string `json:"messageModel,omitempty"`
	ConsumeType    string `json:"consumeType,omitempty"`
	BrokerOffset   int64  `json:"brokerOffset"`
	ConsumerOffset int64  `json:"consumerOffset"`
	Lag            int64  `json:"lag"`
	RetryMessages  int64  `json:"retryMessages"`
	DLQMessages    int64  `json:"dlqMessages"`
}

// GroupDetail is a group with its queues and members.
type GroupDetail struct {
	Group
	Config        *GroupConfig      `json:"config,omitempty"`
	Queues        []QueueLag        `json:"queues"`
	Clients       []Member          `json:"clients"`
	Subscriptions map[string]string `json:"subscriptions"` // topic -> expression
}

// systemGroup reports groups the tools and RocketMQ itself use.
func systemGroup(name string) bool {
	switch name {
	case ToolsGroup, ResendGroup, "FILTERSRV_CONSUMER", "__MONITOR_CONSUMER", "SELF_TEST_C_GROUP",
		"CID_ONS-HTTP-PROXY", "CID_ONSAPI_PERMISSION", "CID_ONSAPI_OWNER", "CID_ONSAPI_PULL", "CID_DefaultHeartBeatSyncerTopic":
		return true
	}
	return strings.HasPrefix(name, "CID_RMQ_SYS_") || strings.HasPrefix(name, "CID_SYS_RMQ_")
}

// groupConfigs returns the subscription groups of every broker group
// (ReadBrokers) by name.
func (c *Client) groupConfigs(ctx context.Context) (map[string]GroupConfig, error) {
	brokers, err := c.ReadBrokers(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]GroupConfig)
	for _, b := range brokers {
		resp, err := c.invoke(ctx, b.Addr, remoting.ReqGetAllSubscriptionGroupConfig, nil, nil)
		if err != nil {
			return nil, err
		}
		var body struct {
			SubscriptionGroupTable map[string]GroupConfig `json:"subscriptionGroupTable"`
		}
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			return nil, fmt.Errorf("admin: decode subscription groups of %s: %w", b.Name, err)
		}
		for name, g := range body.SubscriptionGroupTable {
			g.Group = name
			out[name] = g
		}
	}
	return out, nil
}

// Groups lists the consumer groups with their totals, sorted by name.
// Groups of the tools and of RocketMQ itself are left out unless withSystem.
func (c *Client) Groups(ctx context.Context, withSystem bool) ([]Group, error) {
	cfgs, err := c.groupConfigs(ctx)
	if err != nil {
		return nil, err
	}
	topics, err := c.topicConfigs(ctx, false)
	if err != nil {
		return nil, err
	}
	brokers, err := c.ReadBrokers(ctx)
	if err != nil {
		return nil, err
	}
	var out []Group
	for name := range cfgs {
		if systemGroup(name) && !withSystem {
			continue
		}
		d, err := c.describeGroup(ctx, name, brokers, topics)
		if err != nil {
			return nil, err
		}
		out = append(out, d.Group)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// DescribeGroup returns a group's progress on every queue it consumes,
// its members and its dead-letter count. ErrNotFound if no broker knows
// the group.
func (c *Client) DescribeGroup(ctx context.Context, group string) (GroupDetail, error) {
	cfgs, err := c.groupConfigs(ctx)
	if err != nil {
		return GroupDetail{}, err
	}
	topics, err := c.topicConfigs(ctx, false)
	if err != nil {
		return GroupDetail{}, err
	}
	brokers, err := c.ReadBrokers(ctx)
	if err != nil {
		return GroupDetail{}, err
	}
	d, err := c.describeGroup(ctx, group, brokers, topics)
	if err != nil {
		return GroupDetail{}, err
	}
	if g, ok := cfgs[group]; ok {
		d.Config = &g
	} else if len(d.Queues) == 0 && len(d.Clients) == 0 {
		return GroupDetail{}, fmt.Errorf("%w: consumer group %q", ErrNotFound, group)
	}
	return d, nil
}

func (c *Client) describeGroup(ctx context.Context, group string, brokers []Broker, topics map[string][]TopicOnBroker) (GroupDetail, error) {
	d := GroupDetail{Group: Group{Name: group}, Subscriptions: map[string]string{}}
	for _, b := range brokers {
		qs, err := c.consumeStats(ctx, b, group)
		if err != nil {
			return d, err
		}
		d.Queues = append(d.Queues, qs...)
		if err := c.addMembers(ctx, b, &d); err != nil {
			return d, err
		}
	}
	sortQueueLags(d.Queues)
	for _, q := range d.Queues {
		d.BrokerOffset += q.BrokerOffset
		d.ConsumerOffset += q.ConsumerOffset
		d.Lag += q.Lag
		if q.Topic == RetryPrefix+group {
			d.RetryMessages += q.Lag
		}
	}
	d.Members = len(d.Clients)
	if bs, ok := topics[DLQPrefix+group]; ok {
		qs, err := c.queueStats(ctx, Topic{Name: DLQPrefix + group, Brokers: bs})
		if err != nil {
			return d, err
		}
		d.DLQMessages = sumMessages(qs)
	}
	return d, nil
}

func sortQueueLags(qs []QueueLag) {
	sort.Slice(qs, func(i, j int) bool {
		a, b := qs[i], qs[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Broker != b.Broker {
			return a.Broker < b.Broker
		}
		return a.QueueID < b.QueueID
	})
}

type wireOffsetWrapper struct {
	BrokerOffset   int64 `json:"brokerOffset"`
	ConsumerOffset int64 `json:"consumerOffset"`
	LastTimestamp  int64 `json:"lastTimestamp"`
	// Keel's additions (absent from RocketMQ brokers).
	ConsumedTimestamp         int64 `json:"consumedTimestamp"`
	OldestUnconsumedTimestamp int64 `json:"oldestUnconsumedTimestamp"`
}

// consumeStats asks one broker for a group's progress; a broker that does
// not know the group contributes nothing.
func (c *Client) consumeStats(ctx context.Context, b Broker, group string) ([]QueueLag, error) {
	resp, err := c.invoke(ctx, b.Addr, remoting.ReqGetConsumeStats, map[string]string{"consumerGroup": group}, nil)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	table, err := decodeMQTable[wireOffsetWrapper](resp.Body, "offsetTable")
	if err != nil {
		return nil, err
	}
	out := make([]QueueLag, 0, len(table))
	for mq, o := range table {
		out = append(out, QueueLag{Topic: mq.Topic, Broker: mq.BrokerName, QueueID: mq.QueueID,
			BrokerOffset: o.BrokerOffset, ConsumerOffset: o.ConsumerOffset,
			Lag: max(o.BrokerOffset-o.ConsumerOffset, 0), LastTimestamp: o.LastTimestamp,
			ConsumedAt: o.ConsumedTimestamp, OldestUnconsumed: o.OldestUnconsumedTimestamp})
	}
	return out, nil
}

type wireConsumerConnection struct {
	ConnectionSet     []Member `json:"connectionSet"`
	SubscriptionTable map[string]struct {
		SubString string `json:"subString"`
	} `json:"subscriptionTable"`
	ConsumeType  string `json:"consumeType"`
	MessageModel string `json:"messageModel"`
}

// addMembers merges one broker's view of the group's online clients.
func (c *Client) addMembers(ctx context.Context, b Broker, d *GroupDetail) error {
	resp, err := c.invoke(ctx, b.Addr, remoting.ReqGetConsumerConnectionList, map[string]string{"consumerGroup": d.Name}, nil)
	var re *Error
	if errors.As(err, &re) && (re.Code == remoting.ResConsumerNotOnline || errors.Is(err, ErrNotFound)) {
		return nil
	}
	if err != nil {
		return err
	}
	var cc wireConsumerConnection
	if err := json.Unmarshal(resp.Body, &cc); err != nil {
		return fmt.Errorf("admin: decode consumer connections of %s from %s: %w", d.Name, b.Name, err)
	}
	seen := make(map[string]bool, len(d.Clients))
	for _, m := range d.Clients {
		seen[m.ClientID] = true
	}
	for _, m := range cc.ConnectionSet {
		if !seen[m.ClientID] {
			d.Clients = append(d.Clients, m)
			seen[m.ClientID] = true
		}
	}
	sort.Slice(d.Clients, func(i, j int) bool { return d.Clients[i].ClientID < d.Clients[j].ClientID })
	for t, s := range cc.SubscriptionTable {
		d.Subscriptions[t] = s.SubString
	}
	if cc.MessageModel != "" {
		d.MessageModel, d.ConsumeType = cc.MessageModel, cc.ConsumeType
	}
	return nil
}
