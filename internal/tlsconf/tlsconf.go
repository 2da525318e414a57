// Package tlsconf serves the remoting listeners over TLS: it loads the
// server certificate, key and (for client-certificate verification) the
// trusted CA bundle, and wraps a net.Listener in one of RocketMQ's modes:
//
//	disabled    plain TCP only (no wrapping)
//	permissive  a connection whose first byte is a TLS handshake record
//	            (0x16) is served over TLS, any other as plain TCP
//	enforcing   TLS only; a plain-TCP client's first request is answered
//	            with a plain remoting error saying the port needs TLS, then
//	            the connection is closed, and the broker logs why
//
// Concurrency: the listener is safe for concurrent Accept; each accepted
// connection decides its mode on its first Read or Write (whichever comes
// first; concurrent callers wait for the decision).
//
// Peer (peer.go) builds both ends of a link between two members of a
// broker group (replication), each presenting the same certificate as the
// listeners: mutual TLS against the group's CA bundle, or encryption only.
// MemberClient (member.go) is the client end with which a member dials
// another broker group's master.
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// Mode is the tlsMode setting.
type Mode string

// TLS modes (RocketMQ's tls.server.mode values).
const (
	Disabled   Mode = "disabled"
	Permissive Mode = "permissive"
	Enforcing  Mode = "enforcing"
)

// ClientAuth is the tlsServerNeedClientAuth setting.
type ClientAuth string

// Client certificate policies (RocketMQ's tls.server.need.client.auth).
const (
	ClientAuthNone     ClientAuth = "none"
	ClientAuthOptional ClientAuth = "optional" // verified when presented
	ClientAuthRequire  ClientAuth = "require"
)

// Config names the files of a TLS server.
type Config struct {
	CertFile string // PEM certificate chain
	KeyFile  string // PEM private key (unencrypted)
	// TrustCertFile is a PEM bundle of CAs that sign client certificates;
	// needed when ClientAuth is optional or require.
	TrustCertFile string
	ClientAuth    ClientAuth // "" = none
}

// ErrConfig is wrapped by ServerTLS errors.
var ErrConfig = errors.New("tlsconf: bad TLS configuration")

// ServerTLS loads the files into a server *tls.Config (TLS 1.2 or newer).
func ServerTLS(c Config) (*tls.Config, error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, fmt.Errorf("%w: a certificate file and a key file are required", ErrConfig)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: load certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	switch c.ClientAuth {
	case "", ClientAuthNone:
	case ClientAuthOptional:
		tc.ClientAuth = tls.VerifyClientCertIfGiven
	case ClientAuthRequire:
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("%w: client auth %q is not none, optional or require", ErrConfig, c.ClientAuth)
	}
	if tc.ClientAuth != tls.NoClientCert && c.TrustCertFile == "" {
		return nil, fmt.Errorf("%w: verifying client certificates (%s) needs a trusted CA file", ErrConfig, c.ClientAuth)
	}
	if c.TrustCertFile != "" {
		pem, err := os.ReadFile(c.TrustCertFile)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: read trusted CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrConfig, c.TrustCertFile)
		}
		tc.ClientCAs = pool
	}
	return tc, nil
}

// ParseMode reads a tlsMode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Disabled, Permissive, Enforcing:
		return m, nil
	}
	return "", fmt.Errorf("%w: tls mode %q is not disabled, permissive or enforcing", ErrConfig, s)
}
