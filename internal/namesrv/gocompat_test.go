package namesrv

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/keelmq/keel/internal/remoting"
)

func init() { rlog.SetLogLevel("error") }

// fakeBroker accepts sends and topic deletions and records them.
type fakeBroker struct {
	mu    sync.Mutex
	sends []*remoting.Command
}

func (b *fakeBroker) Handle(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
	switch req.Code {
	case remoting.ReqHeartBeat, remoting.ReqDeleteTopicInBroker:
		return req.NewResponse(remoting.ResSuccess, "")
	case remoting.ReqSendMessage:
		b.mu.Lock()
		b.sends = append(b.sends, req)
		b.mu.Unlock()
		resp := req.NewResponse(remoting.ResSuccess, "")
		resp.ExtFields = map[string]string{"msgId": "7F00000100002A9F0000000000000001", "queueId": req.Ext("queueId"), "queueOffset": "0"}
		return resp
	}
	return req.NewResponse(remoting.ResRequestCodeNotSupported, fmt.Sprintf("request type %d not supported", req.Code))
}

// TestGoClientUsesRoutes registers a (fake) broker through RegisterBroker
// and checks that the official Go client reads the route: publish queues,
// the master address (a slave is registered too, so a misparsed
// brokerAddrs would send to the slave's dead address), the topic list,
// and topic deletion.
func TestGoClientUsesRoutes(t *testing.T) {
	_, nsAddr := startNamesrv(t, Config{})
	fb := &fakeBroker{}
	brokerAddr := serve(t, remoting.ServerConfig{}, fb)

	cl := dial(t, nsAddr)
	tc := map[string]TopicConfig{"TopicA": {ReadQueueNums: 4, WriteQueueNums: 3, Perm: PermReadWrite}}
	register(t, cl, Registration{Cluster: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: brokerAddr, Topics: tc})
	register(t, cl, Registration{Cluster: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:1", BrokerID: 1})

	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{nsAddr})))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	mqs, err := adm.FetchPublishMessageQueues(ctx, "TopicA")
	if err != nil {
		t.Fatal(err)
	}
	var ids []int
	for _, mq := range mqs {
		if mq.Topic != "TopicA" || mq.BrokerName != "broker-a" {
			t.Fatalf("queue %+v", mq)
		}
		ids = append(ids, mq.QueueId)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []int{0, 1, 2}) { // publish queues follow writeQueueNums
		t.Fatalf("publish queue ids %v", ids)
	}

	list, err := adm.FetchAllTopicList(ctx)
	if err != nil || !slices.Equal(list.TopicList, []string{"TopicA"}) {
		t.Fatalf("topic list %+v %v", list, err)
	}

	sendThroughRoute(t, nsAddr)
	fb.mu.Lock()
	if len(fb.sends) != 1 || fb.sends[0].Ext("topic") != "TopicA" {
		t.Fatalf("broker saw sends %v", fb.sends)
	}
	fb.mu.Unlock()

	err = adm.DeleteTopic(ctx, admin.WithTopicDelete("TopicA"), admin.WithBrokerAddrDelete(brokerAddr),
		admin.WithNameSrvAddr([]string{nsAddr}))
	if err != nil {
		t.Fatal(err)
	}
	if resp, _ := routeOf(t, cl, "TopicA"); resp.Code != remoting.ResTopicNotExist {
		t.Fatalf("route after delete: %v", resp)
	}
}

func sendThroughRoute(t *testing.T, nsAddr string) {
	t.Helper()
	p, err := producer.NewDefaultProducer(
		producer.WithNameServer([]string{nsAddr}),
		producer.WithGroupName("pg"),
		producer.WithInstanceName(fmt.Sprintf("namesrv-test-%d", time.Now().UnixNano())),
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
	res, err := p.SendSync(ctx, primitive.NewMessage("TopicA", []byte("x")))
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != primitive.SendOK || res.MessageQueue.BrokerName != "broker-a" || res.MessageQueue.QueueId > 2 {
		t.Fatalf("send result %+v", res)
	}
}
