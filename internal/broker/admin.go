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
// Creating or updating a topic validates the name (system topics are
// refused) and queue counts (1..MaxQueueNums), persists the table and
// re-registers with the NameServers at once. Deleting a topic drops its
// configuration, its stored queues and its consumer offsets. Codes not in the
// dispatch table get REQUEST_CODE_NOT_SUPPORTED "request type N not
// supported".

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/keelmq/keel/internal/remoting"
)

func (b *Broker) handleCreateTopic(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	topic := e.required("topic")
	tc := newTopicConfig(topic, 0, 0)
	tc.ReadQueueNums = e.int32("readQueueNums", 0, true)
	tc.WriteQueueNums = e.int32("writeQueueNums", 0, true)
	tc.Perm = e.int32("perm", permRW, false)
	tc.TopicSysFlag = e.int32("topicSysFlag", 0, false)
	tc.Order = e.bool("order")
	if f := e.str("topicFilterType"); f != "" {
		tc.TopicFilterType = f
	}
	if e.err != nil {
		return nil, e.err
	}
	if err := validateTopic(topic); err != nil {
		return nil, err
	}
	if isSystemTopic(topic) {
		return nil, protoErrorf(remoting.ResInvalidParameter, "the topic[%s] is conflict with system topic", topic)
	}
	for _, n := range []int32{tc.ReadQueueNums, tc.WriteQueueNums} {
		if n < 1 || n > b.cfg.MaxQueueNums {
			return nil, protoErrorf(remoting.ResInvalidParameter, "queue nums %d out of [1,%d]", n, b.cfg.MaxQueueNums)
		}
	}
	if tc.Perm&^(permRW|permInherit) != 0 {
		return nil, protoErrorf(remoting.ResInvalidParameter, "perm %d invalid", tc.Perm)
	}
	if err := b.topics.put(topic, tc); err != nil {
		return nil, err
	}
	b.log.Info("topic updated", "topic", topic, "read", tc.ReadQueueNums, "write", tc.WriteQueueNums, "perm", tc.Perm)
	b.reg.kick()
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

func (b *Broker) handleDeleteTopic(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	topic := e.required("topic")
	if e.err != nil {
		return nil, e.err
	}
	if isSystemTopic(topic) {
		return nil, protoErrorf(remoting.ResInvalidParameter, "the topic[%s] is a system topic and cannot be deleted", topic)
	}
	if err := b.deleteTopic(topic); err != nil {
		return nil, err
	}
	b.log.Info("topic deleted", "topic", topic)
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

func (b *Broker) handleGetAllGroups(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	groups, ver := b.groups.all()
	ver.Counter &= 0x7FFFFFFF // the Go admin client decodes it as int32
	body, err := json.Marshal(map[string]any{"subscriptionGroupTable": groups, "dataVersion": ver})
	if err != nil {
		return nil, err
	}
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = body
	return resp, nil
}

func (b *Broker) handleRuntimeInfo(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	table := map[string]string{
		"brokerVersionDesc":     "V4_9_4",
		"brokerVersion":         "401",
		"commitLogMaxOffset":    itoa(b.st.VisibleOffset()),
		"brokerName":            b.cfg.BrokerName,
		"clusterName":           b.cfg.ClusterName,
		"heldPullRequests":      itoa(b.pulls.held()),
		"topicCount":            itoa(len(b.Topics())),
		"autoCreateTopicEnable": strings.ToLower(boolString(b.cfg.AutoCreateTopicEnable)),
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
	topics, ver := b.topics.all()
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
	tc, ok := b.topics.get(topic)
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
			b.st.MinOffset(topic, q), b.st.MaxOffset(topic, q))
	}
	buf.WriteString(`}}`)
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = []byte(buf.String())
	return resp, nil
}

func (b *Broker) handleUpdateGroup(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	g := b.newGroupConfig("")
	if err := json.Unmarshal(req.Body, &g); err != nil {
		return nil, protoErrorf(remoting.ResInvalidParameter, "bad subscription group body: %v", err)
	}
	if g.GroupName == "" || len(RetryTopic(g.GroupName)) > 127 {
		return nil, protoErrorf(remoting.ResInvalidParameter, "bad subscription group name %q", g.GroupName)
	}
	if g.RetryQueueNums < 0 || g.RetryQueueNums > b.cfg.MaxQueueNums || g.RetryMaxTimes < 0 {
		return nil, protoErrorf(remoting.ResInvalidParameter, "bad retry settings %d/%d", g.RetryQueueNums, g.RetryMaxTimes)
	}
	if err := b.groups.put(g.GroupName, g); err != nil {
		return nil, err
	}
	b.log.Info("subscription group updated", "group", g.GroupName)
	return req.NewResponse(remoting.ResSuccess, ""), nil
}

func (b *Broker) handleDeleteGroup(ctx context.Context, c *remoting.Conn, req *remoting.Command) (*remoting.Command, error) {
	e := ext{req: req}
	group := e.required("groupName")
	if e.err != nil {
		return nil, e.err
	}
	if _, err := b.groups.remove(group); err != nil {
		return nil, err
	}
	b.offsets.deleteGroup(group)
	b.log.Info("subscription group deleted", "group", group)
	return req.NewResponse(remoting.ResSuccess, ""), nil
}
