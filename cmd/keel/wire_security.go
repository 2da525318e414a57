package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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

// namesrvTLSMode is the tlsMode the NameServer's listener serves. The
// embedded NameServer of serve follows tlsMode, and the broker registers
// with it over TLS (tlsconf.SelfClient: it trusts exactly the listeners'
// own certificate and presents it when client certificates are verified).
// One case cannot work that way: tlsServerNeedClientAuth=require with a
// server certificate that tlsServerTrustCertPath does not accept as a client
// certificate. Then the broker registers over plain TCP and an enforcing
// NameServer is served permissive, with a warning. keel namesrv takes no
// config and so serves plain TCP.
func (p *parts) namesrvTLSMode(embedded bool) (config.TLSMode, error) {
	if p.cfg == nil || p.cfg.TLSMode == config.TLSDisabled {
		return config.TLSDisabled, nil
	}
	if !embedded {
		return p.cfg.TLSMode, nil
	}
	tc, err := p.serverTLS()
	if err != nil {
		return "", err
	}
	client, err := tlsconf.SelfClient(tc)
	switch {
	case err == nil:
		p.embeddedNamesrvTLS = client
	case !errors.Is(err, tlsconf.ErrSelfClientAuth):
		return "", err
	case p.cfg.TLSMode == config.TLSEnforcing:
		p.log.Warn("NameServer served permissive, not enforcing: the broker registers with it over plain TCP, "+
			"because the server certificate cannot authenticate as a client (tlsServerNeedClientAuth=require)", "err", err)
		return config.TLSPermissive, nil
	}
	return p.cfg.TLSMode, nil
}

// namesrvClientTLS is broker.Config.NamesrvTLS: TLS to the embedded
// NameServer when it serves TLS, plain TCP to any other.
func (p *parts) namesrvClientTLS(addr string) *tls.Config {
	if p.embeddedNamesrv != "" && addr == p.embeddedNamesrv {
		return p.embeddedNamesrvTLS
	}
	return nil
}

// peerTLS is the TLS with which this member dials the other broker groups'
// masters' broker listeners (the Kafka door's forwards): nil (plain TCP)
// unless config.PeersTLS.
func (p *parts) peerTLS() (*tls.Config, error) {
	if p.cfg == nil || !p.cfg.PeersTLS() {
		return nil, nil
	}
	return p.memberTLS()
}

// memberTLS is the TLS client configuration of this member towards the
// other groups' masters: it presents the listeners' certificate to a peer
// that asks for one and checks the peer against tlsClientTrustCertPath
// (tlsconf.MemberClient). Loaded once; a bad file stops the start.
func (p *parts) memberTLS() (*tls.Config, error) {
	if p.peerTLSConf != nil {
		return p.peerTLSConf, nil
	}
	tc, err := tlsconf.MemberClient(tlsconf.MemberConfig{CertFile: p.cfg.TLSServerCertPath, KeyFile: p.cfg.TLSServerKeyPath,
		TrustCertFile: p.cfg.TLSClientTrustCertPath})
	if err != nil {
		return nil, fmt.Errorf("tlsEnable: %w", err)
	}
	p.peerTLSConf = tc
	return tc, nil
}
