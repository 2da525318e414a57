package broker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

func consumerIDs(t *testing.T, cl *client, group string) []string {
	t.Helper()
	resp := cl.invoke(remoting.ReqGetConsumerListByGroup, map[string]string{"consumerGroup": group}, nil)
	if resp.Code != remoting.ResSuccess {
		return nil
	}
	var body struct {
		ConsumerIDList []string `json:"consumerIdList"`
	}
	if err := json.Unmarshal(resp.Body, &body); err != nil {
		t.Fatal(err)
	}
	return body.ConsumerIDList
}

func TestHeartbeatGoAndJavaDialects(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	goBody := `{"clientID":"10.0.0.1@1234","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[{"groupName":"cg","consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"TagA || TagB","tagsSet":["TagA","TagB"],"codeSet":["2598919"],"subVersion":1700000000000000000,"expressionType":"TAG"},{"classFilterMode":false,"topic":"%RETRY%cg","subString":"*","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"TAG"}],"unitMode":false}]}`
	wantCode(t, cl.invoke(remoting.ReqHeartBeat, nil, []byte(goBody)), remoting.ResSuccess)
	javaBody := `{"clientID":"10.0.0.2@99","consumerDataSet":[{"consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET","consumeType":"CONSUME_PASSIVELY","groupName":"cg","messageModel":"CLUSTERING","subscriptionDataSet":[{"classFilterMode":false,"codeSet":[2598919,2598920],"expressionType":"TAG","subString":"TagA || TagB","subVersion":"1700000000000","tagsSet":["TagA","TagB"],"topic":"T"}],"unitMode":false}],"producerDataSet":[]}`
	wantCode(t, cl.invoke(remoting.ReqHeartBeat, nil, []byte(javaBody)), remoting.ResSuccess)
	ids := consumerIDs(t, cl, "cg")
	if len(ids) != 2 || ids[0] != "10.0.0.1@1234" || ids[1] != "10.0.0.2@99" {
		t.Fatalf("consumer ids %v", ids)
	}
	_, sub, ok := e.b.core.Consumers().Lookup("cg", "T")
	if !ok || sub == nil || sub.MatchesAll() || sub.Tags() != 2 {
		t.Fatalf("subscription %+v", sub)
	}
	if _, ok := e.b.Topic("%RETRY%cg"); !ok {
		t.Fatal("retry topic not created on heartbeat")
	}
	if _, ok := e.b.Group("cg"); !ok {
		t.Fatal("subscription group not created on heartbeat")
	}
	if e.b.ProducerConn("pg") == nil {
		t.Fatal("producer not registered")
	}
	wantCode(t, cl.invoke(remoting.ReqHeartBeat, nil, []byte(`{"clientID":`)), remoting.ResInvalidParameter)
}

func TestConsumerMembershipNotifies(t *testing.T) {
	e := startEnv(t, nil)
	a, b := e.dial(), e.dial()
	wantCode(t, a.heartbeat("A", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, b.heartbeat("B", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	waitFor(t, "A notified of B joining", func() bool { return a.countReceived(remoting.ReqNotifyConsumerIDsChanged) >= 2 })
	if got := consumerIDs(t, a, "g"); len(got) != 2 {
		t.Fatalf("ids %v", got)
	}
	// A heartbeat from a known member changes nothing.
	before := a.countReceived(remoting.ReqNotifyConsumerIDsChanged)
	wantCode(t, b.heartbeat("B", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	// B's connection closes: A is told and B is gone.
	b.c.Close()
	waitFor(t, "A notified of B leaving", func() bool { return a.countReceived(remoting.ReqNotifyConsumerIDsChanged) > before })
	if got := consumerIDs(t, a, "g"); len(got) != 1 || got[0] != "A" {
		t.Fatalf("ids after close %v", got)
	}
	if a.countReceived(remoting.ReqNotifyConsumerIDsChanged) != before+1 {
		t.Fatalf("notifications %d, want %d", a.countReceived(remoting.ReqNotifyConsumerIDsChanged), before+1)
	}
}

func TestUnregisterClient(t *testing.T) {
	e := startEnv(t, nil)
	a := e.dial()
	wantCode(t, a.heartbeat("A", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	wantCode(t, a.invoke(remoting.ReqUnregisterClient, map[string]string{"clientID": "A", "consumerGroup": "g"}, nil), remoting.ResSuccess)
	if ids := consumerIDs(t, a, "g"); len(ids) != 0 {
		t.Fatalf("ids %v", ids)
	}
	wantCode(t, a.invoke(remoting.ReqGetConsumerListByGroup, map[string]string{"consumerGroup": "g"}, nil), remoting.ResSystemError)
}

func TestConsumerExpiry(t *testing.T) {
	clk := newFakeClock()
	e := startEnv(t, func(c *Config) { c.Now = clk.Now })
	a, b := e.dial(), e.dial()
	wantCode(t, a.heartbeat("A", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	clk.Advance(100 * time.Second)
	wantCode(t, b.heartbeat("B", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
	clk.Advance(30 * time.Second)
	e.b.scanClients()
	if ids := consumerIDs(t, b, "g"); len(ids) != 1 || ids[0] != "B" {
		t.Fatalf("ids after expiry %v", ids)
	}
}

func TestCheckClientConfig(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.invoke(remoting.ReqCheckClientConfig, nil, []byte(`{"group":"g","subscriptionData":{"expressionType":"TAG"}}`)), remoting.ResSuccess)
	wantCode(t, cl.invoke(remoting.ReqCheckClientConfig, nil, []byte(`{"group":"g","subscriptionData":{"expressionType":"SQL92"}}`)), remoting.ResSystemError)
}

func TestUnknownRequestCode(t *testing.T) {
	e := startEnv(t, nil)
	resp := e.dial().invoke(999, nil, nil)
	wantCode(t, resp, remoting.ResRequestCodeNotSupported)
	if resp.Remark != "request type 999 not supported" {
		t.Fatalf("remark %q", resp.Remark)
	}
}
