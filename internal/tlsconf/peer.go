package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// PeerConfig names the files of a link between two members of a broker
// group (replication), on which each end is both a server and a client.
type PeerConfig struct {
	CertFile string // PEM certificate chain: the member's own, presented by both ends
	KeyFile  string // PEM private key (unencrypted)
	// TrustCertFile, if set, is a PEM bundle of the CAs that sign the
	// group's certificates: both ends present their certificate and verify
	// the other's against it (mutual TLS). Empty: no certificate is
	// verified; the link is encrypted, and something else (the shared
	// secret) must authenticate the peer.
	TrustCertFile string
}

// Peer returns the TLS configurations of the two ends of a member link:
// server for the end that accepts, client for the one that dials.
// Verification, when TrustCertFile is set, checks the peer's chain up to
// a trusted CA and nothing else (no host name, any extended key usage):
// the CA is the group's, and members dial each other by address.
func Peer(c PeerConfig) (server, client *tls.Config, err error) {
	if c.CertFile == "" || c.KeyFile == "" {
		return nil, nil, fmt.Errorf("%w: a certificate file and a key file are required", ErrConfig)
	}
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: load certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	client = &tls.Config{MinVersion: tls.VersionTLS12,
		// Verification is verifyPeer's (below) or none, never a host name's.
		InsecureSkipVerify: true}
	if c.TrustCertFile == "" {
		return server, client, nil
	}
	pem, err := os.ReadFile(c.TrustCertFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsconf: read trusted CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrConfig, c.TrustCertFile)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error { return verifyPeer(raw, pool) }
	server.ClientAuth = tls.RequireAnyClientCert
	server.VerifyPeerCertificate = verify
	client.Certificates = []tls.Certificate{cert}
	client.VerifyPeerCertificate = verify
	return server, client, nil
}

// verifyPeer checks a peer's certificate chain (leaf first) against roots.
func verifyPeer(raw [][]byte, roots *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("tlsconf: the peer presented no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, der := range raw {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("tlsconf: the peer's certificate: %w", err)
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err != nil {
		return fmt.Errorf("tlsconf: the peer's certificate is not signed by a trusted CA: %w", err)
	}
	return nil
}
