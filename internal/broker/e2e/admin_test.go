package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/testcluster"
)

// TestAdminClient drives the Go client's admin package: create a topic on
// the broker, see it in the route and the topic list, list subscription
// groups, delete the topic.
func TestAdminClient(t *testing.T) {
	c := startCluster(t)
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver([]string{c.NamesrvAddr()})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := testcluster.Uniq("Admin")
	err = adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(c.BrokerAddr()),
		admin.WithReadQueueNums(3), admin.WithWriteQueueNums(3))
	if err != nil {
		t.Fatal(err)
	}
	c.WaitRoute(topic)
	mqs, err := adm.FetchPublishMessageQueues(ctx, topic)
	if err != nil || len(mqs) != 3 {
		t.Fatalf("publish queues %v %v", mqs, err)
	}
	list, err := adm.FetchAllTopicList(ctx)
	if err != nil || !slices.Contains(list.TopicList, topic) {
		t.Fatalf("topic list %v %v", list, err)
	}

	group := testcluster.Uniq("cg")
	startConsumer(t, newPushConsumer(t, c, group), topic, "*", newReceived())
	groups, err := adm.GetAllSubscriptionGroup(ctx, c.BrokerAddr(), 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g, ok := groups.SubscriptionGroupTable[group]; !ok || g.RetryMaxTimes != 16 {
		t.Fatalf("group %s not listed: %+v", group, groups.SubscriptionGroupTable)
	}

	if err := adm.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(c.BrokerAddr()),
		admin.WithNameSrvAddr([]string{c.NamesrvAddr()})); err != nil {
		t.Fatal(err)
	}
	testcluster.WaitFor(t, 10*time.Second, "route gone", func() bool {
		return c.invoke(c.NamesrvAddr(), remoting.ReqGetRouteInfoByTopic, map[string]string{"topic": topic}).Code == remoting.ResTopicNotExist
	})
	if _, ok := c.Broker().Topic(topic); ok {
		t.Fatal("broker still has the topic")
	}
}
