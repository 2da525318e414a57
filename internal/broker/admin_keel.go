package broker

// Consumer progress for operators: GET_CONSUME_STATS (208) and
// GET_CONSUMER_CONNECTION_LIST (203), in the body shapes of RocketMQ's Java
// broker so that both Keel's admin client and mqadmin read them.
//
// GET_CONSUME_STATS (ext consumerGroup, optional topic) answers
// ConsumeStats as fastjson writes it, with MessageQueue objects as keys:
//
//	{"consumeTps":0.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:
//	  {"brokerOffset":10,"consumerOffset":7,"lastTimestamp":1700000000000}}}
//
// The topics are those the group has committed offsets for (including
// %RETRY%<group>) and those its online members subscribe to, or only the
// requested one; topics that no longer exist are skipped. A queue without a
// committed offset reports consumerOffset 0. lastTimestamp is the store time
// of the last consumed message (0 if none); Keel adds consumedTimestamp, when
// the group's offset last moved forward (0 if not since the broker started),
// and oldestUnconsumedTimestamp, the store time of the first message not
// consumed yet (0 if none), which clients ignore. An unknown group gets an empty
// table, as in Java. consumeTps is how fast the group's committed offsets
// advanced over the last minute, in messages per second (consume_tps.go),
// on the requested topic or on all the group's topics.
//
// GET_CONSUMER_CONNECTION_LIST (ext consumerGroup) answers
// ConsumerConnection: the online members with their addresses and the
// language and version their latest heartbeat's header carried, the group's
// subscriptions and consume type, model and start point; a group with no
// member online gets CONSUMER_NOT_ONLINE (206).

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/remoting"
)

// QueueProgress is a consumer group's progress on one queue.
type QueueProgress struct {
	Topic          string
	QueueID        int32
	BrokerOffset   int64 // next offset the queue will assign
	ConsumerOffset int64 // next offset the group will consume (0 if none committed)
	// ConsumedAt is when the group's committed offset last moved forward
	// (Unix ms; 0: not since the broker started).
	ConsumedAt int64
}

// Lag is the number of messages stored but not yet consumed.
func (q QueueProgress) Lag() int64 { return max(q.BrokerOffset-q.ConsumerOffset, 0) }

// ConsumeProgress returns a group's progress on every queue of the topics
// it consumes (or of topic only, if not empty), sorted by topic and queue.
// It reads offsets only (no message), so it is cheap enough for every
// metrics scrape.
func (b *Broker) ConsumeProgress(group, topic string) []QueueProgress {
	topics := b.groupTopics(group)
	if topic != "" {
		topics = []string{topic}
	}
	var out []QueueProgress
	for _, t := range topics {
		tc, ok := b.core.Topic(t)
		if !ok {
			continue
		}
		for q := int32(0); q < tc.ReadQueueNums; q++ {
			p := QueueProgress{Topic: t, QueueID: q, BrokerOffset: b.core.MaxOffset(t, q)}
			if off, ok := b.core.ConsumerOffset(group, t, q, false); ok && off > 0 {
				p.ConsumerOffset = off
				p.ConsumedAt = b.core.ConsumedAt(group, t, q)
			}
			out = append(out, p)
		}
	}
	return out
}

// OldestUnconsumedTime returns the store time (Unix ms) of the first
// message p's group has not consumed (at its offset, or the queue's oldest
// retained message if retention passed it), or 0 when there is none.
func (b *Broker) OldestUnconsumedTime(p QueueProgress) int64 {
	if p.Lag() == 0 {
		return 0
	}
	return b.core.StoreTimeAt(p.Topic, p.QueueID, max(p.ConsumerOffset, b.core.MinOffset(p.Topic, p.QueueID)))
}

// groupTopics lists, sorted, the topics a group has offsets for or
// subscribes to.
func (b *Broker) groupTopics(group string) []string {
	set := b.core.OffsetTopics(group)
	for _, t := range b.core.Consumers().SubscribedTopics(group) {
		set[t] = true
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// GroupNames lists, sorted, every consumer group the broker knows: its
// subscription groups, the groups with members online and the groups with
// committed offsets.
func (b *Broker) GroupNames() []string {
	set := make(map[string]bool)
	groups, _ := b.core.GroupTable()
	for g := range groups {
		set[g] = true
	}
	for _, g := range b.core.Consumers().GroupNames() {
		set[g] = true
	}
	for _, g := range b.core.OffsetGroups() {
		set[g] = true
	}
	out := make([]string, 0, len(set))
	for g := range set {
		out = append(out, g)
	}
	sort.Strings(out)
	return out
}

func (b *Broker) handleGetConsumeStats(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group := e.required("consumerGroup")
	if e.err != nil {
		return nil, e.err
	}
	var buf strings.Builder
	buf.WriteString(`{"consumeTps":`)
	buf.WriteString(formatTps(b.core.ConsumeRate(group, e.str("topic"))))
	buf.WriteString(`,"offsetTable":{`)
	for i, p := range b.ConsumeProgress(group, e.str("topic")) {
		if i > 0 {
			buf.WriteByte(',')
		}
		mq, err := json.Marshal(messageQueue{BrokerName: b.cfg.BrokerName, QueueID: p.QueueID, Topic: p.Topic})
		if err != nil {
			return nil, err
		}
		buf.Write(mq)
		var last int64
		if p.ConsumerOffset > 0 {
			last = b.core.StoreTimeAt(p.Topic, p.QueueID, p.ConsumerOffset-1)
		}
		fmt.Fprintf(&buf, `:{"brokerOffset":%d,"consumerOffset":%d,"lastTimestamp":%d,"consumedTimestamp":%d,"oldestUnconsumedTimestamp":%d}`,
			p.BrokerOffset, p.ConsumerOffset, last, p.ConsumedAt, b.OldestUnconsumedTime(p))
	}
	buf.WriteString(`}}`)
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = []byte(buf.String())
	return resp, nil
}

// formatTps writes a rate as a JSON double the way fastjson does (always
// with a fraction), to a thousandth.
func formatTps(v float64) string {
	s := strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// consumerConnection is Java's ConsumerConnection.
type consumerConnection struct {
	ConnectionSet     []connectionInfo            `json:"connectionSet"`
	ConsumeFromWhere  string                      `json:"consumeFromWhere"`
	ConsumeType       string                      `json:"consumeType"`
	MessageModel      string                      `json:"messageModel"`
	SubscriptionTable map[string]subscriptionInfo `json:"subscriptionTable"`
}

type connectionInfo struct {
	ClientAddr string `json:"clientAddr"`
	ClientID   string `json:"clientId"`
	Language   string `json:"language"`
	Version    int    `json:"version"`
}

type subscriptionInfo struct {
	ClassFilterMode bool     `json:"classFilterMode"`
	CodeSet         []int64  `json:"codeSet"`
	ExpressionType  string   `json:"expressionType"`
	SubString       string   `json:"subString"`
	SubVersion      int64    `json:"subVersion"`
	TagsSet         []string `json:"tagsSet"`
	Topic           string   `json:"topic"`
}

// connection returns the group's ConsumerConnection; ok is false when no
// member is online.
func (b *Broker) connection(group string) (consumerConnection, bool) {
	g, ok := b.core.Consumers().Group(group)
	if !ok {
		return consumerConnection{}, false
	}
	cc := consumerConnection{ConsumeFromWhere: g.ConsumeFromWhere, ConsumeType: g.ConsumeType,
		MessageModel: g.MessageModel, SubscriptionTable: make(map[string]subscriptionInfo, len(g.Subscriptions))}
	for _, mb := range g.Members { // sorted by client ID
		c, _ := mb.Conn.(*remoting.Conn)
		cc.ConnectionSet = append(cc.ConnectionSet, connectionInfo{ClientAddr: peerAddr(c).String(),
			ClientID: mb.ID, Language: mb.Language, Version: mb.Version})
	}
	for t, s := range g.Subscriptions {
		cc.SubscriptionTable[t] = subscriptionInfo{Topic: t, SubString: s.Expression, ExpressionType: s.Type,
			SubVersion: s.Version, TagsSet: []string{}, CodeSet: []int64{}}
	}
	return cc, true
}

func (b *Broker) handleGetConsumerConnections(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group := e.required("consumerGroup")
	if e.err != nil {
		return nil, e.err
	}
	cc, ok := b.connection(group)
	if ok || addKafkaMembers(&cc, b.kafkaMembers(group)) { // admin_kafka.go
		ok = true
	}
	if !ok {
		return nil, protoErrorf(remoting.ResConsumerNotOnline, "the consumer group[%s] not online", group)
	}
	body, err := json.Marshal(cc)
	if err != nil {
		return nil, err
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}
