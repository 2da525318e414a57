package broker

import (
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

func sendBackExt(group string, phys int64, delayLevel, max int32) map[string]string {
	return map[string]string{"group": group, "offset": itoa(phys), "delayLevel": itoa(delayLevel),
		"originMsgId": "ORIG", "originTopic": "T", "unitMode": "false", "maxReconsumeTimes": itoa(max)}
}

func lastMessage(t *testing.T, e *env, topic string) *message.Message {
	t.Helper()
	e.waitMax(topic, 0, 1)
	max := e.st.MaxOffset(topic, 0)
	res, err := e.st.GetMessage(topic, 0, max-1, 1, 1<<20, nil)
	if err != nil || len(res.Records) != 1 {
		t.Fatalf("read %s: %v", topic, err)
	}
	defer res.Release()
	m, err := message.Decode(append([]byte(nil), res.Records[0]...))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSendBackToRetryThroughScheduler(t *testing.T) {
	e := startEnv(t, nil)
	sched := &fakeScheduler{st: e.st}
	e.b.SetScheduler(sched)
	cl := e.dial()
	resp := cl.sendV1("T", 0, tagProps("A"), []byte("body"))
	_, phys, _ := message.ParseOffsetMsgID(resp.ExtFields["msgId"])
	e.waitConfirmed(phys)
	wantCode(t, cl.invoke(remoting.ReqConsumerSendMsgBack, sendBackExt("g", phys, 0, 16), nil), remoting.ResSuccess)
	calls := sched.get()
	if len(calls) != 1 || calls[0].topic != "%RETRY%g" || calls[0].level != 3 {
		t.Fatalf("scheduler calls %+v", calls)
	}
	m := lastMessage(t, e, "%RETRY%g")
	if m.ReconsumeTimes != 1 || string(m.Body) != "body" {
		t.Fatalf("retry message %+v", m)
	}
	props := message.ParseProperties(m.Properties)
	if props["RETRY_TOPIC"] != "T" || props["ORIGIN_MESSAGE_ID"] != "ORIG" || props["TAGS"] != "A" || props["DELAY"] != "3" {
		t.Fatalf("retry properties %v", props)
	}
	// Second failure of the retry message: level 4, RETRY_TOPIC kept.
	_, phys2, _ := message.ParseOffsetMsgID(message.OffsetMsgID(m.StoreHost, m.PhysOffset))
	e.waitConfirmed(phys2)
	wantCode(t, cl.invoke(remoting.ReqConsumerSendMsgBack, sendBackExt("g", phys2, 0, 16), nil), remoting.ResSuccess)
	e.waitMax("%RETRY%g", 0, 2)
	if calls := sched.get(); len(calls) != 2 || calls[1].level != 4 {
		t.Fatalf("scheduler calls %+v", calls)
	}
	if m2 := lastMessage(t, e, "%RETRY%g"); message.ParseProperties(m2.Properties)["RETRY_TOPIC"] != "T" || m2.ReconsumeTimes != 2 {
		t.Fatalf("second retry %+v", m2)
	}
}

func TestSendBackToDLQ(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	resp := cl.sendV1("T", 0, "", []byte("body"))
	_, phys, _ := message.ParseOffsetMsgID(resp.ExtFields["msgId"])
	e.waitConfirmed(phys)
	// maxReconsumeTimes 0: the first failure is already over the limit.
	wantCode(t, cl.invoke(remoting.ReqConsumerSendMsgBack, sendBackExt("g", phys, 0, 0), nil), remoting.ResSuccess)
	if m := lastMessage(t, e, "%DLQ%g"); m.ReconsumeTimes != 1 {
		t.Fatalf("dlq message %+v", m)
	}
	// delayLevel -1 (orderly consumer over the limit) also goes to the DLQ.
	wantCode(t, cl.invoke(remoting.ReqConsumerSendMsgBack, sendBackExt("g", phys, -1, 16), nil), remoting.ResSuccess)
	e.waitMax("%DLQ%g", 0, 2)
}

func TestSendBackWithoutSchedulerRetriesAtOnce(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	resp := cl.sendV1("T", 0, "", []byte("body"))
	_, phys, _ := message.ParseOffsetMsgID(resp.ExtFields["msgId"])
	e.waitConfirmed(phys)
	wantCode(t, cl.invoke(remoting.ReqConsumerSendMsgBack, sendBackExt("g", phys, 0, 16), nil), remoting.ResSuccess)
	m := lastMessage(t, e, "%RETRY%g")
	if _, ok := message.Property(m.Properties, "DELAY"); ok {
		t.Fatal("immediate retry kept DELAY")
	}
	wantCode(t, cl.invoke(remoting.ReqConsumerSendMsgBack, sendBackExt("g", 987654321, 0, 16), nil), remoting.ResSystemError)
}
