package metrics

import (
	"testing"
)

var sampleNetLimits = NetLimitStats{
	BudgetCapacityBytes: 1 << 20,
	Doors:               []DoorBudgetStats{{Door: "kafka", HeldBytes: 4096, Waiting: 2, Waited: 7}},
	Listeners:           []ListenerLimitStats{{Listener: "Kafka", Open: 3, RefusedTotal: 5, RefusedPerAddress: 1, AcceptErrors: 2}},
}

func TestNetLimitMetrics(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.NetLimits = func() NetLimitStats { return sampleNetLimits } })
	got := e.scrape()
	for series, want := range map[string]float64{
		`keel_request_budget_bytes`:                                                         1 << 20,
		`keel_request_bytes_in_flight{door="kafka"}`:                                        4096,
		`keel_requests_waiting_for_budget{door="kafka"}`:                                    2,
		`keel_requests_waited_for_budget_total{door="kafka"}`:                               7,
		`keel_listener_connections{listener="Kafka"}`:                                       3,
		`keel_connections_refused_total{limit="maxConnections",listener="Kafka"}`:           5,
		`keel_connections_refused_total{limit="maxConnectionsPerAddress",listener="Kafka"}`: 1,
		`keel_accept_errors_total{listener="Kafka"}`:                                        2,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
}
