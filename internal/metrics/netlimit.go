package metrics

// The network bounds (internal/netlimit), read at scrape time from
// Sources.NetLimits: the request budget per front door and the
// connections each listener refused. The wiring copies netlimit's
// figures into NetLimitStats.

import "github.com/prometheus/client_golang/prometheus"

// NetLimitStats are the request budget's and the listeners' figures.
type NetLimitStats struct {
	BudgetCapacityBytes int64
	Doors               []DoorBudgetStats
	Listeners           []ListenerLimitStats
}

// DoorBudgetStats is one front door's share of the request budget.
type DoorBudgetStats struct {
	Door      string
	HeldBytes int64  // held by the door's requests in flight
	Waiting   int64  // the door's requests waiting for budget now
	Waited    uint64 // requests that had to wait, since start
}

// ListenerLimitStats is one listener's connection figures.
type ListenerLimitStats struct {
	Listener          string
	Open              int
	RefusedTotal      uint64 // refused for maxConnections
	RefusedPerAddress uint64 // refused for maxConnectionsPerAddress
	AcceptErrors      uint64
}

var (
	dBudgetCapacity = desc("keel_request_budget_bytes", "Capacity of the broker-wide budget of request bytes being read and decoded (maxInFlightRequestBytes).")
	dBudgetHeld     = desc("keel_request_bytes_in_flight", "Bytes held by requests being read, decoded and served, per front door.", "door")
	dBudgetWaiting  = desc("keel_requests_waiting_for_budget", "Requests waiting for room in the request budget now (their connections read nothing meanwhile), per front door.", "door")
	dBudgetWaited   = desc("keel_requests_waited_for_budget_total", "Requests that had to wait for room in the request budget, per front door.", "door")
	dConnOpen       = desc("keel_listener_connections", "Open connections per listener.", "listener")
	dConnRefused    = desc("keel_connections_refused_total", "Connections closed at accept because a limit was reached, per listener and limit (maxConnections, maxConnectionsPerAddress).", "listener", "limit")
	dAcceptErrors   = desc("keel_accept_errors_total", "Failed accepts (EMFILE and the like), retried after a pause, per listener.", "listener")
	netLimitDescs   = []*prometheus.Desc{dBudgetCapacity, dBudgetHeld, dBudgetWaiting, dBudgetWaited, dConnOpen, dConnRefused, dAcceptErrors}
)

func (c *collector) collectNetLimits(ch chan<- prometheus.Metric) {
	if c.m.cfg.NetLimits == nil {
		return
	}
	st := c.m.cfg.NetLimits()
	if st.BudgetCapacityBytes > 0 {
		gauge(ch, dBudgetCapacity, float64(st.BudgetCapacityBytes))
	}
	for _, d := range st.Doors {
		gauge(ch, dBudgetHeld, float64(d.HeldBytes), d.Door)
		gauge(ch, dBudgetWaiting, float64(d.Waiting), d.Door)
		counter(ch, dBudgetWaited, float64(d.Waited), d.Door)
	}
	for _, l := range st.Listeners {
		gauge(ch, dConnOpen, float64(l.Open), l.Listener)
		counter(ch, dConnRefused, float64(l.RefusedTotal), l.Listener, "maxConnections")
		counter(ch, dConnRefused, float64(l.RefusedPerAddress), l.Listener, "maxConnectionsPerAddress")
		counter(ch, dAcceptErrors, float64(l.AcceptErrors), l.Listener)
	}
}
