package admin

import "testing"

// TestAppendMissing: a group a broker's door saw and that has no master
// registered is added once with an error naming it and the broker that
// saw it; a group that is listed is not added again.
func TestAppendMissing(t *testing.T) {
	out := appendMissing([]BrokerAMQP{
		{Broker: "broker-a", MissingGroups: []string{"broker-c", "broker-b"}},
		{Broker: "broker-b", MissingGroups: []string{"broker-c"}},
	})
	if len(out) != 3 || out[2].Broker != "broker-c" || out[2].Queues == nil ||
		out[2].Err != "no master of broker group broker-c is registered with the NameServers (broker broker-a's AMQP door saw it in the cluster)" {
		t.Fatalf("%+v", out)
	}
}
