package namesrv

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

// TestAMQPClusterView: the amqpAddr and amqpsAddr of registrations are kept with the
// broker's entry and answered per cluster, by brokerName and brokerId;
// brokers without an AMQP door and other clusters are left out; a bad
// address refuses the registration.
func TestAMQPClusterView(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	for _, r := range []Registration{
		{Cluster: "c", BrokerName: "broker-b", BrokerAddr: "10.0.0.1:10911", AMQPAddr: "10.0.0.1:5872"},
		{Cluster: "c", BrokerName: "broker-b", BrokerAddr: "10.0.0.2:10911", BrokerID: 1}, // a slave: no door
		{Cluster: "c", BrokerName: "broker-a", BrokerAddr: "10.0.0.3:10911", AMQPAddr: "10.0.0.3:5672"},
		{Cluster: "d", BrokerName: "broker-d", BrokerAddr: "10.0.0.5:10911", AMQPAddr: "10.0.0.5:5672"},
		{Cluster: "c", BrokerName: "broker-c", BrokerAddr: "10.0.0.7:10911", AMQPSAddr: "10.0.0.7:5671"}, // amqps only
	} {
		register(t, cl, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ac, err := GetAMQPCluster(ctx, cl, "c")
	if err != nil {
		t.Fatal(err)
	}
	want := []AMQPMember{
		{BrokerName: "broker-a", BrokerID: 0, Addr: "10.0.0.3:10911", AMQPAddr: "10.0.0.3:5672"},
		{BrokerName: "broker-b", BrokerID: 0, Addr: "10.0.0.1:10911", AMQPAddr: "10.0.0.1:5872"},
		{BrokerName: "broker-c", BrokerID: 0, Addr: "10.0.0.7:10911", AMQPSAddr: "10.0.0.7:5671"},
	}
	if !reflect.DeepEqual(ac.Members, want) {
		t.Fatalf("members\n got %+v\nwant %+v", ac.Members, want)
	}
	if d, err := GetAMQPCluster(ctx, cl, "d"); err != nil || len(d.Members) != 1 || d.Members[0].AMQPAddr != "10.0.0.5:5672" {
		t.Fatalf("cluster d %+v %v", d, err)
	}
	err = RegisterBroker(ctx, cl, Registration{Cluster: "c", BrokerName: "broker-e", BrokerAddr: "10.0.0.6:10911", AMQPAddr: "no port"})
	if err == nil || !strings.Contains(err.Error(), "bad amqpAddr") {
		t.Fatalf("bad amqpAddr: %v", err)
	}
	err = RegisterBroker(ctx, cl, Registration{Cluster: "c", BrokerName: "broker-e", BrokerAddr: "10.0.0.6:10911", AMQPSAddr: "no port"})
	if err == nil || !strings.Contains(err.Error(), "bad amqpsAddr") {
		t.Fatalf("bad amqpsAddr: %v", err)
	}
	resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqGetAMQPCluster, nil, nil))
	if err != nil || resp.Code != remoting.ResSystemError {
		t.Fatalf("without clusterName: %v %+v", err, resp)
	}
}
