package broker

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

func TestCreateAndDeleteTopic(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	create := map[string]string{"topic": "Admin", "defaultTopic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8",
		"perm": "6", "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"}
	wantCode(t, cl.invoke(remoting.ReqUpdateAndCreateTopic, create, nil), remoting.ResSuccess)
	if tc, ok := e.b.Topic("Admin"); !ok || tc.ReadQueueNums != 8 {
		t.Fatalf("topic %+v", tc)
	}
	wantCode(t, cl.sendV1("Admin", 7, "", []byte("x")), remoting.ResSuccess)
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": "Admin", "queueId": "7", "commitOffset": "1"}, nil), remoting.ResSuccess)

	bad := map[string]string{"topic": "TBW102", "readQueueNums": "8", "writeQueueNums": "8"}
	wantCode(t, cl.invoke(remoting.ReqUpdateAndCreateTopic, bad, nil), remoting.ResInvalidParameter)
	bad = map[string]string{"topic": "X", "readQueueNums": "0", "writeQueueNums": "8"}
	wantCode(t, cl.invoke(remoting.ReqUpdateAndCreateTopic, bad, nil), remoting.ResInvalidParameter)

	wantCode(t, cl.invoke(remoting.ReqDeleteTopicInBroker, map[string]string{"topic": "Admin"}, nil), remoting.ResSuccess)
	if _, ok := e.b.Topic("Admin"); ok {
		t.Fatal("topic still configured")
	}
	if _, ok := e.b.core.ConsumerOffset("g", "Admin", 7, false); ok {
		t.Fatal("offsets of the deleted topic kept")
	}
	if e.st.MaxOffset("Admin", 7) != 0 {
		t.Fatal("queue data kept")
	}
}

func TestGetAllSubscriptionGroups(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.heartbeat("A", "g1", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	resp := cl.invoke(remoting.ReqGetAllSubscriptionGroupConfig, nil, nil)
	wantCode(t, resp, remoting.ResSuccess)
	var body struct {
		SubscriptionGroupTable map[string]GroupConfig `json:"subscriptionGroupTable"`
		DataVersion            struct {
			Timestamp int64 `json:"timestamp"`
			Counter   int32 `json:"counter"`
		} `json:"dataVersion"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatal(err)
	}
	g, ok := body.SubscriptionGroupTable["g1"]
	if !ok || g.RetryMaxTimes != 16 || g.RetryQueueNums != 1 || !g.ConsumeEnable {
		t.Fatalf("group %+v", g)
	}
}

func TestRuntimeInfo(t *testing.T) {
	e := startEnv(t, nil)
	resp := e.dial().invoke(remoting.ReqGetBrokerRuntimeInfo, nil, nil)
	wantCode(t, resp, remoting.ResSuccess)
	var body struct {
		Table map[string]string `json:"table"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil || body.Table["brokerVersion"] != "401" {
		t.Fatalf("runtime info %s %v", resp.Body, err)
	}
}

func TestTopicStatsAndAllTopicConfig(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("S", 1, "", []byte("x")), remoting.ResSuccess)
	e.waitMax("S", 1, 1)
	resp := cl.invoke(remoting.ReqGetTopicStatsInfo, map[string]string{"topic": "S"}, nil)
	wantCode(t, resp, remoting.ResSuccess)
	want := `{"brokerName":"broker-a","queueId":1,"topic":"S"}:{"minOffset":0,"maxOffset":1,"lastUpdateTimestamp":0}`
	if !strings.Contains(string(resp.Body), want) {
		t.Fatalf("stats body %s", resp.Body)
	}
	wantCode(t, cl.invoke(remoting.ReqGetTopicStatsInfo, map[string]string{"topic": "Nope"}, nil), remoting.ResTopicNotExist)
	resp = cl.invoke(remoting.ReqGetAllTopicConfig, nil, nil)
	wantCode(t, resp, remoting.ResSuccess)
	var all struct {
		TopicConfigTable map[string]TopicConfig `json:"topicConfigTable"`
	}
	if err := json.Unmarshal(resp.Body, &all); err != nil || all.TopicConfigTable["S"].WriteQueueNums != 4 {
		t.Fatalf("all topics %s %v", resp.Body, err)
	}
}

func TestUpdateAndDeleteGroup(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.AutoCreateSubscriptionGroup = false })
	cl := e.dial()
	wantCode(t, cl.heartbeat("A", "g", "T", "*", "CLUSTERING"), remoting.ResSubscriptionGroupNotExist)
	wantCode(t, cl.invoke(remoting.ReqUpdateAndCreateSubscription, nil, []byte(`{"groupName":"g","retryMaxTimes":3}`)), remoting.ResSuccess)
	g, ok := e.b.Group("g")
	if !ok || g.RetryMaxTimes != 3 || g.RetryQueueNums != 1 || !g.ConsumeEnable {
		t.Fatalf("group %+v", g)
	}
	wantCode(t, cl.heartbeat("A", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, cl.invoke(remoting.ReqUpdateAndCreateSubscription, nil, []byte(`{"groupName":""}`)), remoting.ResInvalidParameter)
	wantCode(t, cl.invoke(remoting.ReqDeleteSubscriptionGroup, map[string]string{"groupName": "g"}, nil), remoting.ResSuccess)
	if _, ok := e.b.Group("g"); ok {
		t.Fatal("group kept")
	}
}
