package main

import (
	"context"
	"crypto/tls"
	"net"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/tlsconf"
)

// listenerWrap turns a bound listener into the one the remoting server
// serves (TLS); nil serves the listener as is.
type listenerWrap func(net.Listener) (net.Listener, error)

// aclStarter loads the ACL file when aclEnable=true (a missing or invalid
// file stops the start) and runs its reload loop. It must come before the
// broker's starters, which wrap the broker's handler with p.acl.
func (p *parts) aclStarter() starter {
	return func() (service, error) {
		if !p.cfg.ACLEnable {
			return service{name: "acl (off)"}, nil
		}
		a, err := acl.New(acl.Config{Path: p.cfg.ACLPath(), Logger: p.log.With("component", "acl")})
		if err != nil {
			return service{}, err
		}
		p.acl = a
		return service{
			name: "acl",
			run:  func(ctx context.Context) error { a.Run(ctx); return nil },
		}, nil
	}
}

// serverTLS loads the listeners' certificate once; nil when tlsMode is
// disabled.
func (p *parts) serverTLS() (*tls.Config, error) {
	if p.cfg.TLSMode == config.TLSDisabled || p.tls != nil {
		return p.tls, nil
	}
	tc, err := tlsconf.ServerTLS(tlsconf.Config{
		CertFile:      p.cfg.TLSServerCertPath,
		KeyFile:       p.cfg.TLSServerKeyPath,
		TrustCertFile: p.cfg.TLSServerTrustCertPath,
		ClientAuth:    tlsconf.ClientAuth(p.cfg.TLSServerNeedClientAuth),
	})
	p.tls = tc
	return tc, err
}

// tlsWrap returns the listener wrapper of a component for mode. Without a
// config (keel namesrv takes none) there is no TLS.
func (p *parts) tlsWrap(component string, mode config.TLSMode) (listenerWrap, error) {
	if p.cfg == nil || mode == config.TLSDisabled {
		return nil, nil
	}
	tc, err := p.serverTLS()
	if err != nil || tc == nil {
		return nil, err
	}
	log := p.log.With("component", component)
	return func(ln net.Listener) (net.Listener, error) {
		return tlsconf.Wrap(ln, tlsconf.ListenerConfig{TLS: tc, Mode: tlsconf.Mode(mode), Logger: log})
	}, nil
}

// namesrvTLSMode: the NameServer is served permissive when TLS is on,
// because brokers register over plain TCP until the broker's NameServer
// client can dial TLS (see docs/security.md).
func (p *parts) namesrvTLSMode() config.TLSMode {
	switch {
	case p.cfg == nil:
		return config.TLSDisabled
	case p.cfg.TLSMode == config.TLSEnforcing:
		return config.TLSPermissive
	}
	return p.cfg.TLSMode
}
