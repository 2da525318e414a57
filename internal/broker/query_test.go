package broker

import (
	"testing"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
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
