package tlsconf

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// ErrSelfClientAuth reports that a listener requires client certificates
// and its own certificate is not one it accepts, so SelfClient cannot
// connect to it.
var ErrSelfClientAuth = errors.New("tlsconf: the listener's own certificate is not a client certificate it accepts")

// SelfClient returns the TLS configuration with which a component connects
// to a listener served by this same process with server (under keel serve,
// the broker registering with its embedded NameServer).
//
// The client trusts exactly server's own certificate: the peer must present
// the identical leaf, so no CA or host name is involved and the connection
// cannot be served by anything else. When server verifies client
// certificates, the client presents the same certificate if it verifies
// against server.ClientCAs for client authentication. If it does not and
// server requires one, SelfClient fails with ErrSelfClientAuth (the caller
// decides whether to fall back); if certificates are optional, the client
// presents none.
func SelfClient(server *tls.Config) (*tls.Config, error) {
	if server == nil || len(server.Certificates) == 0 || len(server.Certificates[0].Certificate) == 0 {
		return nil, fmt.Errorf("%w: no server certificate", ErrConfig)
	}
	cert := server.Certificates[0]
	own := cert.Certificate[0]
	client := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is VerifyConnection's exact-certificate check,
		// stronger than a CA chain and independent of the dialled address.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, own) {
				return errors.New("tlsconf: the peer's certificate is not this process's own: not our listener")
			}
			return nil
		},
	}
	switch server.ClientAuth {
	case tls.NoClientCert, tls.RequestClientCert:
		return client, nil
	case tls.RequireAnyClientCert:
		client.Certificates = []tls.Certificate{cert}
		return client, nil
	}
	if err := verifiesAsClient(cert, server.ClientCAs, now(server)); err != nil {
		if server.ClientAuth == tls.RequireAndVerifyClientCert {
			return nil, fmt.Errorf("%w: %v", ErrSelfClientAuth, err)
		}
		return client, nil // optional: connect without one
	}
	client.Certificates = []tls.Certificate{cert}
	return client, nil
}

// verifiesAsClient checks cert as a TLS server with client CAs roots would
// check a client certificate.
func verifiesAsClient(cert tls.Certificate, roots *x509.CertPool, at time.Time) error {
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return err
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		inter.AddCert(c)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: at,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	return err
}

func now(c *tls.Config) time.Time {
	if c.Time != nil {
		return c.Time()
	}
	return time.Now()
}
