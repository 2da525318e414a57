package broker

// Admin requests: UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215),
// GET_ALL_TOPIC_CONFIG (21), GET_TOPIC_STATS_INFO (202),
// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), UPDATE_AND_CREATE_SUBSCRIPTIONGROUP
// (200), DELETE_SUBSCRIPTIONGROUP (207), GET_BROKER_RUNTIME_INFO (28).
//
// GET_TOPIC_STATS_INFO answers RocketMQ's TopicStatsTable, whose map keys
// are MessageQueue objects (fastjson style, as Java admin tools expect):
// {"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"minOffset":0,
// "maxOffset":5,"lastUpdateTimestamp":0}}}. That body is not strict JSON.
//
// The changes themselves are the core's (core.Broker.UpdateTopic,
// DeleteTopic, UpdateGroup, DeleteGroup): creating or updating a topic
// validates the name (system topics are refused) and queue counts
// (1..MaxQueueNums), persists the table and re-registers with the
// NameServers at once. Deleting a topic drops its configuration, its stored
// queues and its consumer offsets. Codes not in the
// dispatch table get REQUEST_CODE_NOT_SUPPORTED "request type N not
// supported".

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

func (b *Broker) handleCreateTopic(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	topic := e.required("topic")
	tc := core.NewTopicConfig(topic, 0, 0)
	tc.ReadQueueNums = e.int32("readQueueNums", 0, true)
	tc.WriteQueueNums = e.int32("writeQueueNums", 0, true)
	tc.Perm = e.int32("perm", core.PermRW, false)
	tc.TopicSysFlag = e.int32("topicSysFlag", 0, false)
	tc.Order = e.bool("order")
	if f := e.str("topicFilterType"); f != "" {
		tc.TopicFilterType = f
	}
	if e.err != nil {
		return nil, e.err
	}
	if err := b.core.UpdateTopic(tc); err != nil {
		return nil, err
	}
	b.awaitRegistered(ctx)
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

// awaitRegistered waits, at most RegisterTimeout, until a registration
// with the NameServers that covers every change made so far has ended, so
// that a client asking them for a route right after the answer (a
// consumer started once `keel topic create` returned) finds it, as after
// RocketMQ's own UPDATE_AND_CREATE_TOPIC. A NameServer that does not
// answer delays the answer, never fails it: the change is made and the
// next round announces it.
func (b *Broker) awaitRegistered(ctx context.Context) {
	if len(b.cfg.NamesrvAddrs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.RegisterTimeout)
	defer cancel()
	b.reg.awaitRound(ctx)
}

func (b *Broker) handleDeleteTopic(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	topic := e.required("topic")
	if e.err != nil {
		return nil, e.err
	}
	if err := b.core.DeleteTopic(topic); err != nil {
		return nil, err
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

func (b *Broker) handleGetAllGroups(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	groups, ver := b.core.GroupTable()
	ver.Counter &= 0x7FFFFFFF // the Go admin client decodes it as int32
	body, err := json.Marshal(map[string]any{"subscriptionGroupTable": groups, "dataVersion": ver})
	if err != nil {
		return nil, err
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}

// The RocketMQ release whose protocol Keel speaks, as GET_BROKER_RUNTIME_INFO
// reports it to clients and tools (brokerVersionDesc, brokerVersion).
const (
	rocketMQVersionDesc = "V4_9_4"
	rocketMQVersion     = "401"
)

func (b *Broker) handleRuntimeInfo(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	table := map[string]string{}
	if b.cfg.RuntimeInfo != nil {
		for k, v := range b.cfg.RuntimeInfo() {
			table[k] = v
		}
	}
	for k, v := range map[string]string{
		"keelVersion":           b.cfg.Version,
		"brokerVersionDesc":     rocketMQVersionDesc,
		"brokerVersion":         rocketMQVersion,
		"commitLogMaxOffset":    itoa(b.core.VisibleOffset()),
		"brokerName":            b.cfg.BrokerName,
		"clusterName":           b.cfg.ClusterName,
		"heldPullRequests":      itoa(b.pulls.held()),
		"topicCount":            itoa(len(b.Topics())),
		"autoCreateTopicEnable": strings.ToLower(boolString(b.cfg.AutoCreateTopicEnable)),
	} {
		table[k] = v // the broker's own entries win over RuntimeInfo's
	}
	body, err := json.Marshal(map[string]any{"table": table})
	if err != nil {
		return nil, err
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}

func boolString(v bool) string {
	if v {
		return "true"
	}
	return "false"
}

func (b *Broker) handleGetAllTopicConfig(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	topics, ver := b.core.TopicTable()
	body, err := json.Marshal(map[string]any{"topicConfigTable": topics, "dataVersion": ver})
	if err != nil {
		return nil, err
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}

func (b *Broker) handleTopicStats(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	topic := e.required("topic")
	if e.err != nil {
		return nil, e.err
	}
	tc, ok := b.core.Topic(topic)
	if !ok {
		return nil, protoErrorf(remoting.ResTopicNotExist, "topic[%s] not exist", topic)
	}
	var buf strings.Builder
	buf.WriteString(`{"offsetTable":{`)
	for q := int32(0); q < tc.WriteQueueNums; q++ {
		if q > 0 {
			buf.WriteByte(',')
		}
		mq, _ := json.Marshal(messageQueue{Topic: topic, BrokerName: b.cfg.BrokerName, QueueID: q})
		buf.Write(mq)
		fmt.Fprintf(&buf, `:{"minOffset":%d,"maxOffset":%d,"lastUpdateTimestamp":0}`,
			b.core.MinOffset(topic, q), b.core.MaxOffset(topic, q))
	}
	buf.WriteString(`}}`)
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = []byte(buf.String())
	return resp, nil
}

func (b *Broker) handleUpdateGroup(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	g := b.core.NewGroupConfig("")
	if err := json.Unmarshal(req.Body, &g); err != nil {
		return nil, protoErrorf(remoting.ResInvalidParameter, "bad subscription group body: %v", err)
	}
	if err := b.core.UpdateGroup(g); err != nil {
		return nil, err
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

func (b *Broker) handleDeleteGroup(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group := e.required("groupName")
	if e.err != nil {
		return nil, e.err
	}
	if err := b.core.DeleteGroup(group); err != nil {
		return nil, err
	}
	return req.NewResponse(remoting.ResSuccess, ""), nil
}
