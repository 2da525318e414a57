package broker

import (
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/core"
	"github.com/keelmq/keel/internal/remoting"
)

func TestTopicsSurviveRestart(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	wantCode(t, cl.sendV1("Auto", 0, "", []byte("x")), remoting.ResSuccess)
	e.restart()
	tc, ok := e.b.Topic("Auto")
	if !ok || tc.WriteQueueNums != 4 {
		t.Fatalf("topic after restart %+v %v", tc, ok)
	}
	if tpl, ok := e.b.Topic(DefaultTopic); !ok || tpl.Perm != core.PermInherit|core.PermRW {
		t.Fatalf("TBW102 %+v", tpl)
	}
}

func TestTopicAndGroupLimits(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.MaxTopics = 3; c.MaxGroups = 1 }) // TBW102 + SELF_TEST_TOPIC + 1
	cl := e.dial()
	wantCode(t, cl.sendV1("One", 0, "", []byte("x")), remoting.ResSuccess)
	resp := cl.sendV1("Two", 0, "", []byte("x"))
	wantCode(t, resp, remoting.ResSystemError)
	if !strings.Contains(resp.Remark, "topic limit of 3") {
		t.Fatalf("remark %q", resp.Remark)
	}
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g1", "topic": "One", "queueId": "0", "commitOffset": "1"}, nil), remoting.ResSuccess)
	wantCode(t, cl.invoke(remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g2", "topic": "One", "queueId": "0", "commitOffset": "1"}, nil), remoting.ResSystemError)
}
