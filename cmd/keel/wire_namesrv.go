package main

import (
	"context"

	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
)

// namesrvStarters build the NameServer and its remoting server listening on
// addr. Under serve (embedded), the bound address, made dialable, is added
// to the NameServers the broker registers with (over TLS when the listener
// serves TLS, see namesrvTLSMode). Stop order (reverse): the
// server shuts down, then the NameServer's expiry scan stops.
func (p *parts) namesrvStarters(addr string, embedded bool) []starter {
	var ns *namesrv.Server
	return []starter{
		func() (service, error) {
			ns = namesrv.New(namesrv.Config{Logger: p.log.With("component", "namesrv")})
			return service{
				name: "namesrv",
				run:  ns.Run,
				stop: func(context.Context) error { return ns.Close() },
			}, nil
		},
		func() (service, error) {
			cfg := remoting.ServerConfig{Logger: p.log.With("component", "namesrv-server"), OnConnClose: ns.OnConnClose,
				FrameBudget: p.requestBudget().Door("namesrv")}
			mode, err := p.namesrvTLSMode(embedded)
			if err != nil {
				return service{}, err
			}
			wrap, err := p.tlsWrap("namesrv-server", mode)
			if err != nil {
				return service{}, err
			}
			ln, err := p.listen(listenNamesrv, addr)
			if err != nil {
				return service{}, err
			}
			svc, bound, err := remotingService("namesrv server", ln, cfg, ns.Handler(), wrap)
			if err != nil {
				return service{}, err
			}
			if embedded {
				p.embeddedNamesrv = dialAddr(addr, bound)
				p.namesrvAddrs = append(p.namesrvAddrs, p.embeddedNamesrv)
			}
			p.log.Info("NameServer listening", "addr", bound.String(), "tls", mode,
				"broker_registers_over_tls", embedded && p.embeddedNamesrvTLS != nil, "auth", "none (a NameServer does no access control)", "reach", reach(bound))
			return svc, nil
		},
	}
}
