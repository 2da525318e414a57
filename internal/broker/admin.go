package broker

// Admin requests: UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215),
// GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), GET_BROKER_RUNTIME_INFO (28).
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
		"commitLogMaxOffset":    itoa(b.st.ConfirmedOffset()),
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
