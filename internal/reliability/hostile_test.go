package reliability

import (
	"encoding/binary"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/message"
	"github.com/keelmq/keel/internal/remoting"
)

// rawExchange writes data on a new connection and returns the response
// frame, or closed=true if the broker closed the connection instead.
func rawExchange(t *testing.T, addr string, data []byte) (resp *remoting.Command, closed bool) {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(data); err != nil {
		return nil, true
	}
	var lenBuf [4]byte
	if _, err := io.ReadFull(nc, lenBuf[:]); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("no answer and no close within 10s")
		}
		return nil, true
	}
	n := binary.BigEndian.Uint32(lenBuf[:])
	buf := make([]byte, 4+int(n))
	copy(buf, lenBuf[:])
	if _, err := io.ReadFull(nc, buf[4:]); err != nil {
		t.Fatalf("half a response: %v", err)
	}
	c, err := remoting.DecodeFrame(buf)
	if err != nil {
		t.Fatalf("undecodable response: %v", err)
	}
	return c, false
}

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }

// TestHostileFrames: malformed frames close the connection; the broker
// keeps serving everyone else.
func TestHostileFrames(t *testing.T) {
	panics := &panicCatcher{}
	n := memNode(t, nodeOptions{logger: slog.New(panics), server: remoting.ServerConfig{MaxFrameBytes: 1 << 20}})
	good := frame(t, remoting.ReqGetBrokerRuntimeInfo, 1, nil, nil)
	jsonHdr := func(h string) []byte { // a frame with a JSON header h and no body
		b := be32(uint32(4 + len(h)))
		b = append(b, be32(uint32(len(h)))...)
		return append(b, h...)
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"negative length", append(be32(0xffffffff), 0, 0, 0, 0)},
		{"length above MaxFrameBytes", append(be32(1<<20+1), 0, 0, 0, 10)},
		{"length below the header word", be32(2)},
		{"header length beyond the frame", append(be32(8), append(be32(100), 1, 2, 3, 4)...)},
		{"unknown serialize type", append(be32(8), 7, 0, 0, 2, '{', '}', 0, 0)},
		{"JSON header not JSON", jsonHdr("{not json")},
		{"JSON code not int16", jsonHdr(`{"code":70000,"flag":0,"language":"GO","opaque":1,"serializeTypeCurrentRPC":"JSON","version":401}`)},
		{"binary header truncated", append(be32(8), 1, 0, 0, 4, 0, 10, 0, 1)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, closed := rawExchange(t, n.addr, c.data)
			if !closed {
				t.Fatalf("answered %+v instead of closing the connection", resp)
			}
			if resp, closed := rawExchange(t, n.addr, good); closed || resp.Code != remoting.ResSuccess {
				t.Fatalf("broker no longer serves after %s: %+v closed=%v", c.name, resp, closed)
			}
		})
	}
	if panics.n.Load() != 0 {
		t.Fatalf("handler panics: %s", panics.last)
	}
}

// TestHostileRequests: well-formed frames with unknown codes, missing or
// wrongly typed header fields and oversized messages get the right error
// code with a remark on a connection that stays usable.
func TestHostileRequests(t *testing.T) {
	panics := &panicCatcher{}
	n := memNode(t, nodeOptions{logger: slog.New(panics), brokerCfg: nil})
	fill(t, n, 3, 10)
	cl := n.dial()
	send := func(mut func(map[string]string)) map[string]string {
		e := sendExt(slowTopic, 0, "")
		mut(e)
		return e
	}
	pull := func(mut func(map[string]string)) map[string]string {
		e := pullExt("g", slowTopic, 0, 0, 32, flagSubscription, 0)
		mut(e)
		return e
	}
	big := make([]byte, 4<<20+1)
	longProps := message.EncodeProperties(map[string]string{"K": strings.Repeat("v", 40000)})
	cases := []struct {
		name string
		code int16
		ext  map[string]string
		body []byte
		want int16 // -1: any error code
	}{
		{"unknown request code", 9999, nil, nil, remoting.ResRequestCodeNotSupported},
		{"send without topic", remoting.ReqSendMessage, send(func(e map[string]string) { delete(e, "topic") }), []byte("x"), remoting.ResInvalidParameter},
		{"send queueId not a number", remoting.ReqSendMessage, send(func(e map[string]string) { e["queueId"] = "abc" }), []byte("x"), remoting.ResInvalidParameter},
		{"send queueId out of range", remoting.ReqSendMessage, send(func(e map[string]string) { e["queueId"] = "99999" }), []byte("x"), -1},
		// RocketMQ picks a queue for a negative queueId, and accepts an empty body (clients check it).
		{"send negative queueId", remoting.ReqSendMessage, send(func(e map[string]string) { e["queueId"] = "-7" }), []byte("x"), -2},
		{"send sysFlag huge", remoting.ReqSendMessage, send(func(e map[string]string) { e["sysFlag"] = "99999999999999999999" }), []byte("x"), remoting.ResInvalidParameter},
		{"send body above maxMessageSize", remoting.ReqSendMessage, send(func(map[string]string) {}), big, remoting.ResMessageIllegal},
		{"send empty body", remoting.ReqSendMessage, send(func(map[string]string) {}), nil, -2},
		{"send properties too long", remoting.ReqSendMessage, send(func(e map[string]string) { e["properties"] = longProps }), []byte("x"), remoting.ResMessageIllegal},
		{"send illegal topic name", remoting.ReqSendMessage, send(func(e map[string]string) { e["topic"] = "a b/c" }), []byte("x"), -1},
		{"send topic too long", remoting.ReqSendMessage, send(func(e map[string]string) { e["topic"] = strings.Repeat("t", 200) }), []byte("x"), -1},
		{"batch with a corrupt body", remoting.ReqSendBatchMessage, batchExt(), []byte{0, 0, 0, 99, 1, 2}, remoting.ResMessageIllegal},
		{"batch with an absurd item length", remoting.ReqSendBatchMessage, batchExt(), be32(0x7fffffff), remoting.ResMessageIllegal},
		{"batch with a negative item length", remoting.ReqSendBatchMessage, batchExt(), append(be32(0xfffffff0), make([]byte, 40)...), remoting.ResMessageIllegal},
		{"pull offset not a number", remoting.ReqPullMessage, pull(func(e map[string]string) { e["queueOffset"] = "x" }), nil, remoting.ResInvalidParameter},
		{"pull without group", remoting.ReqPullMessage, pull(func(e map[string]string) { delete(e, "consumerGroup") }), nil, remoting.ResInvalidParameter},
		{"pull negative offset", remoting.ReqPullMessage, pull(func(e map[string]string) { e["queueOffset"] = "-5" }), nil, -1},
		{"pull bad subscription", remoting.ReqPullMessage, pull(func(e map[string]string) { e["expressionType"] = "SQL92"; e["subscription"] = "a >" }), nil, -1},
		{"heartbeat not JSON", remoting.ReqHeartBeat, nil, []byte("{{{"), -1},
		{"offset update not a number", remoting.ReqUpdateConsumerOffset, map[string]string{"consumerGroup": "g", "topic": slowTopic, "queueId": "0", "commitOffset": "1e99"}, nil, remoting.ResInvalidParameter},
		{"view message at a wild offset", remoting.ReqViewMessageByID, map[string]string{"offset": "9223372036854775807"}, nil, -1},
		{"view message at a negative offset", remoting.ReqViewMessageByID, map[string]string{"offset": "-1"}, nil, -1},
		{"send-back of a wild offset", remoting.ReqConsumerSendMsgBack, map[string]string{"group": "g", "offset": "123456789", "delayLevel": "0"}, nil, -1},
		{"query with an absurd maxNum", remoting.ReqQueryMessage, map[string]string{"topic": slowTopic, "key": "k", "maxNum": "2147483647", "beginTimestamp": "0", "endTimestamp": "9223372036854775807"}, nil, -2},
		{"create topic with absurd queues", remoting.ReqUpdateAndCreateTopic, map[string]string{"topic": "Q", "readQueueNums": "1000000000", "writeQueueNums": "1000000000", "perm": "6"}, nil, -1},
		{"lock with a body not JSON", remoting.ReqLockBatchMQ, nil, []byte("[1,2"), -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, err := call(cl, c.code, c.ext, c.body)
			if err != nil {
				t.Fatalf("no answer: %v", err)
			}
			t.Logf("code %d remark %q", resp.Code, tail(resp.Remark, 120))
			switch {
			case c.want == -2: // any answer, success included
			case c.want == -1 && resp.Code == remoting.ResSuccess:
				t.Fatalf("accepted: %+v", resp)
			case c.want >= 0 && resp.Code != c.want:
				t.Fatalf("code %d (%q), want %d", resp.Code, resp.Remark, c.want)
			}
			if resp.Code != remoting.ResSuccess && resp.Remark == "" {
				t.Error("error without a remark")
			}
		})
	}
	if resp, err := call(cl, remoting.ReqSendMessage, sendExt(slowTopic, 0, ""), []byte("still fine")); err != nil || resp.Code != remoting.ResSuccess {
		t.Fatalf("broker no longer serves the same connection: %v %v", resp, err)
	}
	if panics.n.Load() != 0 {
		t.Fatalf("handler panics: %s", panics.last)
	}
}

// batchExt is a SEND_BATCH_MESSAGE header in the V2 short field names.
func batchExt() map[string]string {
	return map[string]string{"a": "pg", "b": slowTopic, "c": "TBW102", "d": "4", "e": "0", "f": "0",
		"g": "1700000000000", "h": "0", "i": "", "j": "0", "k": "false", "m": "true"}
}
