package namesrv

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/remoting"
)

func kafkaCluster(t *testing.T, cl *remoting.Client, cluster string) KafkaCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	kc, err := GetKafkaCluster(ctx, cl, cluster)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestKafkaClusterView: the Kafka fields of registrations are kept with
// the broker's entry and answered per cluster; brokers without a Kafka
// door and other clusters are left out; a route stays as RocketMQ
// clients know it.
func TestKafkaClusterView(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	a0 := Registration{Cluster: "c", BrokerName: "broker-b", BrokerAddr: "10.0.0.1:10911", Topics: topics("T", "OnlyB"),
		Kafka: &KafkaRegistration{Addr: "10.0.0.1:9092", NodeID: 7, Epoch: 3, InSync: []int64{0, 1}}}
	a1 := Registration{Cluster: "c", BrokerName: "broker-b", BrokerAddr: "10.0.0.2:10911", BrokerID: 1,
		Kafka: &KafkaRegistration{NodeID: 8, Epoch: -1, Rack: "r1"}} // a slave: a replica without a door
	b0 := Registration{Cluster: "c", BrokerName: "broker-a", BrokerAddr: "10.0.0.3:10911", Topics: topics("T"),
		Kafka: &KafkaRegistration{Addr: "10.0.0.3:9092", NodeID: 1, Epoch: 0}}
	noKafka := Registration{Cluster: "c", BrokerName: "broker-c", BrokerAddr: "10.0.0.4:10911", Topics: topics("T")}
	other := Registration{Cluster: "d", BrokerName: "broker-d", BrokerAddr: "10.0.0.5:10911", Topics: topics("T"),
		Kafka: &KafkaRegistration{Addr: "10.0.0.5:9092", NodeID: 7, Epoch: -1}} // another cluster may reuse an id
	for _, r := range []Registration{a0, a1, b0, noKafka, other} {
		register(t, cl, r)
	}
	kc := kafkaCluster(t, cl, "c")
	want := []KafkaBroker{
		{BrokerName: "broker-a", BrokerID: 0, Addr: "10.0.0.3:10911", KafkaAddr: "10.0.0.3:9092", NodeID: 1, Epoch: 0},
		{BrokerName: "broker-b", BrokerID: 0, Addr: "10.0.0.1:10911", KafkaAddr: "10.0.0.1:9092", NodeID: 7, Epoch: 3, InSync: []int64{0, 1}},
		{BrokerName: "broker-b", BrokerID: 1, Addr: "10.0.0.2:10911", NodeID: 8, Epoch: -1, Rack: "r1"},
	}
	if !reflect.DeepEqual(kc.Brokers, want) {
		t.Fatalf("brokers\n got %+v\nwant %+v", kc.Brokers, want)
	}
	wantT := []KafkaTopicGroup{{BrokerName: "broker-a", ReadQueueNums: 4, WriteQueueNums: 4, Perm: PermReadWrite},
		{BrokerName: "broker-b", ReadQueueNums: 4, WriteQueueNums: 4, Perm: PermReadWrite},
		{BrokerName: "broker-c", ReadQueueNums: 4, WriteQueueNums: 4, Perm: PermReadWrite}}
	if !reflect.DeepEqual(kc.Topics["T"], wantT) || len(kc.Topics["OnlyB"]) != 1 || len(kc.Topics) != 2 {
		t.Fatalf("topics %+v", kc.Topics)
	}
	if d := kafkaCluster(t, cl, "d"); len(d.Brokers) != 1 || d.Brokers[0].NodeID != 7 {
		t.Fatalf("cluster d %+v", d)
	}
	// The route RocketMQ clients read carries none of it.
	if _, body := routeOf(t, cl, "OnlyB"); strings.Contains(body, "9092") || strings.Contains(body, "kafka") {
		t.Fatalf("route %s", body)
	}
	// Re-registering without a Kafka door drops the broker from the view.
	a1.Kafka = nil
	register(t, cl, a1)
	if kc := kafkaCluster(t, cl, "c"); len(kc.Brokers) != 2 {
		t.Fatalf("after a1 dropped its door: %+v", kc.Brokers)
	}
}

// TestKafkaNodeIDConflictRefused: a registration taking a Kafka node id a
// live broker of the cluster at another address holds is taken without
// its Kafka door, and the answer names the holder; the same broker
// re-registering, or the id once its holder is gone, is fine.
func TestKafkaNodeIDConflictRefused(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	first := Registration{Cluster: "c", BrokerName: "broker-a", BrokerAddr: "10.0.0.1:10911", Topics: topics("T"),
		Kafka: &KafkaRegistration{Addr: "10.0.0.1:9092", NodeID: 0, Epoch: -1}}
	register(t, cl, first)
	if res := register(t, cl, first); res.KafkaRefused != "" { // again: the same broker
		t.Fatalf("re-registration: %+v", res)
	}
	second := Registration{Cluster: "c", BrokerName: "broker-b", BrokerAddr: "10.0.0.2:10911", Topics: topics("T"),
		Kafka: &KafkaRegistration{Addr: "10.0.0.2:9092", NodeID: 0, Epoch: -1}}
	res := register(t, cl, second)
	if !strings.Contains(res.KafkaRefused, "kafkaNodeId 0 is held by 10.0.0.1:10911 (brokerName broker-a, brokerId 0)") {
		t.Fatalf("conflicting registration: %+v", res)
	}
	// Its RocketMQ registration stands: broker-b is routed.
	if _, body := routeOf(t, cl, "T"); !strings.Contains(body, "broker-b") {
		t.Fatalf("broker-b not routed: %s", body)
	}
	if kc := kafkaCluster(t, cl, "c"); len(kc.Brokers) != 1 || kc.Brokers[0].BrokerName != "broker-a" {
		t.Fatalf("view %+v", kc.Brokers)
	}
	call(t, cl, remoting.ReqUnregisterBroker, map[string]string{"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911",
		"clusterName": "c", "brokerId": "0"}, nil)
	if res := register(t, cl, second); res.KafkaRefused != "" {
		t.Fatalf("after the holder left: %+v", res)
	}
	if kc := kafkaCluster(t, cl, "c"); len(kc.Brokers) != 1 || kc.Brokers[0].BrokerName != "broker-b" {
		t.Fatalf("view %+v", kc.Brokers)
	}
}

// TestKafkaRegistrationBadFields: malformed Kafka fields refuse the
// registration with a clear error.
func TestKafkaRegistrationBadFields(t *testing.T) {
	_, addr := startNamesrv(t, Config{})
	cl := dial(t, addr)
	base := map[string]string{"brokerName": "broker-a", "brokerAddr": "10.0.0.1:10911", "clusterName": "c", "brokerId": "0",
		"kafkaAddr": "10.0.0.1:9092"}
	long := strings.Repeat("1,", maxInSync) + "1"
	for _, bad := range []map[string]string{
		{}, {"kafkaNodeId": "-1"}, {"kafkaNodeId": ""}, {"kafkaNodeId": "x"}, {"kafkaNodeId": "1", "kafkaEpoch": "-2"},
		{"kafkaNodeId": "1", "kafkaInSync": "0,x"}, {"kafkaNodeId": "1", "kafkaInSync": long},
		{"kafkaNodeId": "1", "kafkaRack": strings.Repeat("r", maxRack+1)},
	} {
		ext := map[string]string{}
		for k, v := range base {
			ext[k] = v
		}
		for k, v := range bad {
			ext[k] = v
		}
		resp := call(t, cl, remoting.ReqRegisterBroker, ext, nil)
		if resp.Code != remoting.ResSystemError || !strings.Contains(resp.Remark, "kafka") {
			t.Errorf("%v: %d %s", bad, resp.Code, resp.Remark)
		}
	}
	if kc := kafkaCluster(t, cl, "c"); len(kc.Brokers) != 0 {
		t.Fatalf("view %+v", kc.Brokers)
	}
	if resp := call(t, cl, remoting.ReqGetKafkaCluster, nil, nil); resp.Code != remoting.ResSystemError {
		t.Fatalf("no cluster name: %d", resp.Code)
	}
}
