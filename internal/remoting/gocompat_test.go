package remoting

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

// These tests drive the official Go client (its remoting client is
// internal to its module, so it is reached through admin and producer)
// against our server and check that it decodes our responses.

func init() { rlog.SetLogLevel("error") }

// fakeCluster answers as a NameServer and a broker at once: the route it
// returns points back at the same server.
type fakeCluster struct {
	addr string
	mu   sync.Mutex
	seen []*Command // requests other than heartbeats
}

func (f *fakeCluster) Handle(_ context.Context, _ *Conn, req *Command) *Command {
	if req.Code != ReqHeartBeat {
		f.mu.Lock()
		f.seen = append(f.seen, req)
		f.mu.Unlock()
	}
	switch req.Code {
	case ReqGetAllTopicListFromNameServer:
		resp := req.NewResponse(ResSuccess, "")
		resp.Body = []byte(`{"topicList":["TopicA","TopicB"],"brokerAddr":"` + f.addr + `"}`)
		return resp
	case ReqGetRouteInfoByTopic:
		if req.Ext("topic") != "TopicA" {
			return req.NewResponse(ResTopicNotExist, "No topic route info in name server for the topic: "+req.Ext("topic"))
		}
		resp := req.NewResponse(ResSuccess, "")
		resp.Body = []byte(`{"brokerDatas":[{"brokerAddrs":{"0":"` + f.addr + `"},"brokerName":"broker-a","cluster":"C"}],` +
			`"filterServerTable":{},"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}`)
		return resp
	case ReqSendMessage:
		resp := req.NewResponse(ResSuccess, "")
		resp.ExtFields = map[string]string{"msgId": "7F00000100002A9F0000000000000042", "queueId": req.Ext("queueId"), "queueOffset": "42"}
		return resp
	case ReqHeartBeat:
		return req.NewResponse(ResSuccess, "")
	}
	return req.NewResponse(ResRequestCodeNotSupported, fmt.Sprintf("request type %d not supported", req.Code))
}

func startFakeCluster(t *testing.T) *fakeCluster {
	f := &fakeCluster{}
	_, f.addr = startServer(t, ServerConfig{}, f)
	return f
}

func TestGoClientAdminTopicList(t *testing.T) {
	f := startFakeCluster(t)
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{f.addr})))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	list, err := adm.FetchAllTopicList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.TopicList) != 2 || list.TopicList[0] != "TopicA" || list.BrokerAddr != f.addr {
		t.Fatalf("topic list %+v", list)
	}
	clusters, err := adm.FetchClusterList("TopicA")
	if err != nil || len(clusters) != 1 || clusters[0] != "C" {
		t.Fatalf("clusters %v %v", clusters, err)
	}
	if _, err := adm.FetchClusterList("Nope"); err == nil {
		t.Fatal("unknown topic: no error")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if req := f.seen[0]; req.Language != "GO" || req.Version != 317 || req.SerializeType != SerializeJSON {
		t.Fatalf("Go client request decoded as %v (language %q version %d)", req, req.Language, req.Version)
	}
}

func TestGoClientProducerSendSync(t *testing.T) {
	f := startFakeCluster(t)
	p, err := producer.NewDefaultProducer(
		producer.WithNameServer([]string{f.addr}),
		producer.WithGroupName("pg"),
		producer.WithInstanceName(fmt.Sprintf("remoting-test-%d", time.Now().UnixNano())),
		producer.WithRetry(0),
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	msg := primitive.NewMessage("TopicA", []byte("hello keel"))
	msg.WithTag("TagA")
	msg.WithKeys([]string{"k1"})
	res, err := p.SendSync(ctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != primitive.SendOK || res.QueueOffset != 42 || res.OffsetMsgID != "7F00000100002A9F0000000000000042" ||
		res.MessageQueue.BrokerName != "broker-a" {
		t.Fatalf("send result %+v", res)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var send *Command
	for _, r := range f.seen {
		if r.Code == ReqSendMessage {
			send = r
		}
	}
	if send == nil {
		t.Fatal("no SEND_MESSAGE seen")
	}
	if string(send.Body) != "hello keel" || send.Ext("topic") != "TopicA" || send.Ext("producerGroup") != "pg" {
		t.Fatalf("send request %v", send)
	}
	if _, err := send.ExtInt32("queueId"); err != nil {
		t.Fatal(err)
	}
}
