package main

// The network bounds (internal/netlimit): every listener a command serves
// is wrapped by p.listen with the connection limits of broker.conf
// (maxConnections, maxConnectionsPerAddress), and the front doors share
// one request budget (maxInFlightRequestBytes). keel namesrv, which reads
// no broker.conf, uses the defaults.

import (
	"net"
	"sync"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/metrics"
	"github.com/keelmq/keel/internal/netlimit"
)

// netBounds holds a command's limited listeners and its request budget.
type netBounds struct {
	mu        sync.Mutex
	listeners []*netlimit.Listener
	budget    *netlimit.Budget
}

// netConfig is broker.conf, or the defaults for a command without one.
func (p *parts) netConfig() *config.Broker {
	if p.cfg != nil {
		return p.cfg
	}
	return config.Default()
}

// limitListener wraps ln, called name, with the connection limits.
func (p *parts) limitListener(name string, ln net.Listener) net.Listener {
	cfg := p.netConfig()
	l := netlimit.NewListener(ln, name, netlimit.Limits{MaxConns: cfg.MaxConnections, MaxConnsPerAddr: cfg.MaxConnectionsPerAddress},
		p.log.With("component", "netlimit"))
	p.net.mu.Lock()
	p.net.listeners = append(p.net.listeners, l)
	p.net.mu.Unlock()
	return l
}

// requestBudget returns the command's request budget (made on first use).
func (p *parts) requestBudget() *netlimit.Budget {
	p.net.mu.Lock()
	defer p.net.mu.Unlock()
	if p.net.budget == nil {
		p.net.budget = netlimit.NewBudget(p.netConfig().MaxInFlightRequestBytes)
	}
	return p.net.budget
}

// netLimitStats is metrics.Sources.NetLimits.
func (p *parts) netLimitStats() metrics.NetLimitStats {
	p.net.mu.Lock()
	ls := append([]*netlimit.Listener(nil), p.net.listeners...)
	b := p.net.budget
	p.net.mu.Unlock()
	var st metrics.NetLimitStats
	if b != nil {
		st.BudgetCapacityBytes = b.CapacityBytes()
		for _, d := range b.Stats() {
			st.Doors = append(st.Doors, metrics.DoorBudgetStats{Door: d.Door, HeldBytes: d.HeldBytes, Waiting: d.Waiting, Waited: d.Waited})
		}
	}
	for _, l := range ls {
		s := l.Stats()
		st.Listeners = append(st.Listeners, metrics.ListenerLimitStats{Listener: s.Listener, Open: s.Open,
			RefusedTotal: s.RefusedTotal, RefusedPerAddress: s.RefusedPerAddr, AcceptErrors: s.AcceptErrors})
	}
	return st
}
