package broker

import (
	"context"
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/store/record"
	"github.com/keelmq/keel/internal/translate"
)

func TestQueryMessageByKeyAndUniqKey(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	props := message.EncodeProperties(map[string]string{"KEYS": "order-1 order-2", "UNIQ_KEY": "UQ1"})
	wantCode(t, cl.sendV1("T", 0, props, []byte("payload")), remoting.ResSuccess)
	wantCode(t, cl.sendV1("T", 0, "", []byte("other")), remoting.ResSuccess)
	query := func(key string, unique bool) []*message.Message {
		ext := map[string]string{"topic": "T", "key": key, "maxNum": "10", "beginTimestamp": "0", "endTimestamp": "99999999999999"}
		if unique {
			ext["_UNIQUE_KEY_QUERY"] = "true"
		}
		var resp = cl.invoke(remoting.ReqQueryMessage, ext, nil)
		if resp.Code == remoting.ResQueryNotFound {
			return nil
		}
		wantCode(t, resp, remoting.ResSuccess)
		return splitRecords(t, resp.Body)
	}
	waitFor(t, "index", func() bool { return len(query("order-2", false)) == 1 })
	if ms := query("UQ1", true); len(ms) != 1 || string(ms[0].Body) != "payload" {
		t.Fatalf("by uniq key: %d", len(ms))
	}
	if ms := query("nope", false); ms != nil {
		t.Fatalf("unknown key found %d", len(ms))
	}
}

func TestViewMessageByID(t *testing.T) {
	e := startEnv(t, nil)
	cl := e.dial()
	resp := cl.sendV1("T", 0, "", []byte("v"))
	e.waitMax("T", 0, 1)
	_, phys, err := message.ParseOffsetMsgID(resp.ExtFields["msgId"])
	if err != nil {
		t.Fatal(err)
	}
	e.waitConfirmed(phys)
	view := cl.invoke(remoting.ReqViewMessageByID, map[string]string{"offset": itoa(phys)}, nil)
	wantCode(t, view, remoting.ResSuccess)
	if ms := splitRecords(t, view.Body); len(ms) != 1 || string(ms[0].Body) != "v" {
		t.Fatal("view returned the wrong record")
	}
	wantCode(t, cl.invoke(remoting.ReqViewMessageByID, map[string]string{"offset": "123456789"}, nil), remoting.ResSystemError)
	wantCode(t, cl.invoke(remoting.ReqViewMessageByID, map[string]string{"offset": "x"}, nil), remoting.ResInvalidParameter)
}

// TestConvertedIDsOfTwoGroups: one Kafka record stored at the same
// CommitLog offset by brokers of two groups reaches RocketMQ consumers with
// two different message ids, and each group finds only its own by id: the
// other group's id names an offset that means nothing there.
func TestConvertedIDsOfTwoGroups(t *testing.T) {
	ids := map[string]string{}
	envs := map[string]*env{}
	for _, name := range []string{"broker-a", "broker-b"} {
		e := startEnv(t, func(c *Config) { c.BrokerName = name })
		if _, err := e.b.Core().EnsureTopic("T", 1, 6); err != nil {
			t.Fatal(err)
		}
		batch := translate.AppendKafkaBatch(nil, []translate.KafkaRecord{{Offset: 0, Timestamp: 1000, Key: []byte("k"), Value: []byte("same")}})
		rec, err := record.AppendEnvelope(nil, record.KafkaBatch, 1, []record.Dest{{Topic: "T", QueueID: 0}}, batch)
		if err != nil {
			t.Fatal(err)
		}
		if res, _ := e.st.PutRecord(context.Background(), rec); !res.OK() {
			t.Fatalf("put record: %+v", res)
		}
		e.waitMax("T", 0, 1)
		cl := e.dial()
		wantCode(t, cl.heartbeat("c1", "g", "T", "*", "CLUSTERING"), remoting.ResSuccess)
		resp := cl.invoke(remoting.ReqPullMessage, pullExt("g", "T", 0, 0, 0, 0), nil)
		wantCode(t, resp, remoting.ResSuccess)
		ms := splitRecords(t, resp.Body)
		if len(ms) != 1 {
			t.Fatalf("%s: pulled %d messages, want 1", name, len(ms))
		}
		if ms[0].PhysOffset != 0 {
			t.Fatalf("%s: the record is at %d, want 0 (the first of the CommitLog)", name, ms[0].PhysOffset)
		}
		ids[name], envs[name] = message.ParseProperties(ms[0].Properties)[message.PropUniqKey], e
	}
	if ids["broker-a"] == "" || ids["broker-a"] == ids["broker-b"] {
		t.Fatalf("the record at offset 0 of broker-a and of broker-b: ids %q and %q", ids["broker-a"], ids["broker-b"])
	}
	byID := func(e *env, id string) int {
		cl := e.dial()
		resp := cl.invoke(remoting.ReqQueryMessage, map[string]string{"topic": "T", "key": id, "maxNum": "10",
			"beginTimestamp": "0", "endTimestamp": "99999999999999", "_UNIQUE_KEY_QUERY": "true"}, nil)
		if resp.Code == remoting.ResQueryNotFound {
			return 0
		}
		wantCode(t, resp, remoting.ResSuccess)
		return len(splitRecords(t, resp.Body))
	}
	if n := byID(envs["broker-a"], ids["broker-a"]); n != 1 {
		t.Fatalf("broker-a found its own message %d times by id", n)
	}
	if n := byID(envs["broker-a"], ids["broker-b"]); n != 0 {
		t.Fatalf("broker-a found broker-b's message id %d times", n)
	}
}
