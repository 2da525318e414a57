package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// MemberConfig names the files with which a broker dials the other broker
// groups' masters (requests forwarded between groups of a cluster).
type MemberConfig struct {
	// CertFile and KeyFile, if set, are the member's own certificate
	// (the listeners'), presented to a peer that asks for one.
	CertFile, KeyFile string
	// TrustCertFile, if set, is a PEM bundle of the CAs that sign the
	// members' certificates: a peer's chain must verify up to one of
	// them (no host name is checked: members dial each other by address).
	// Empty: the system's roots and the dialled host, as any TLS client.
	TrustCertFile string
}

// MemberClient returns the TLS configuration of a member dialling
// another group's master.
func MemberClient(c MemberConfig) (*tls.Config, error) {
	client := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: load certificate %s and key %s: %w", c.CertFile, c.KeyFile, err)
		}
		client.Certificates = []tls.Certificate{cert}
	}
	if c.TrustCertFile == "" {
		return client, nil
	}
	pem, err := os.ReadFile(c.TrustCertFile)
	if err != nil {
		return nil, fmt.Errorf("tlsconf: read the members' CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrConfig, c.TrustCertFile)
	}
	// Verification is verifyPeer's chain check, never a host name's.
	client.InsecureSkipVerify = true
	client.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error { return verifyPeer(raw, pool) }
	return client, nil
}
