package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net"
	"path/filepath"
	"testing"
)

// dualUseCert writes a certificate signed by p's CA that is good for both
// server and client authentication and returns its cert and key files.
func dualUseCert(t *testing.T, p *pki) (string, string) {
	t.Helper()
	ca, caKey, _ := newCA(t, "dual CA")
	key := newKey(t)
	_, der := certify(t, &x509.Certificate{Subject: pkix.Name{CommonName: "keel"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}, ca, &key.PublicKey, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(p.dir, "dual.pem"), filepath.Join(p.dir, "dual.key")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	writePEM(t, filepath.Join(p.dir, "dual-ca.pem"), "CERTIFICATE", ca.Raw)
	return certFile, keyFile
}

func selfClient(t *testing.T, server *tls.Config) *tls.Config {
	t.Helper()
	c, err := SelfClient(server)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSelfClient: the client reaches the listener served with the same
// configuration, and only that one.
func TestSelfClient(t *testing.T) {
	p := newPKI(t)
	srv := serverTLS(t, Config{CertFile: p.certFile, KeyFile: p.keyFile})
	addr, _ := serve(t, ListenerConfig{Mode: Enforcing, TLS: srv})
	client := selfClient(t, srv)
	if resp, err := call(addr, client); err != nil || string(resp.Body) != "ping" {
		t.Fatalf("own listener: %v %v", resp, err)
	}
	if len(client.Certificates) != 0 {
		t.Fatal("a client certificate is presented to a listener that asks for none")
	}

	// A listener with another certificate (any CA): refused.
	other := newPKI(t)
	otherAddr, _ := serve(t, ListenerConfig{Mode: Enforcing, TLS: serverTLS(t, Config{CertFile: other.certFile, KeyFile: other.keyFile})})
	if _, err := call(otherAddr, client); err == nil {
		t.Fatal("connected to a listener with a different certificate")
	}
}

// TestSelfClientAuth: with client certificates required, the listener's
// own certificate is presented when it qualifies as a client certificate;
// otherwise SelfClient says so. Optional client auth connects without one.
func TestSelfClientAuth(t *testing.T) {
	p := newPKI(t)
	// p's server certificate is for server authentication only.
	_, err := SelfClient(serverTLS(t, Config{CertFile: p.certFile, KeyFile: p.keyFile, TrustCertFile: p.caFile, ClientAuth: ClientAuthRequire}))
	if !errors.Is(err, ErrSelfClientAuth) {
		t.Fatalf("server-only certificate with client auth required: %v, want ErrSelfClientAuth", err)
	}

	optional := serverTLS(t, Config{CertFile: p.certFile, KeyFile: p.keyFile, TrustCertFile: p.caFile, ClientAuth: ClientAuthOptional})
	addr, _ := serve(t, ListenerConfig{Mode: Enforcing, TLS: optional})
	if _, err := call(addr, selfClient(t, optional)); err != nil {
		t.Fatalf("optional client auth: %v", err)
	}

	certFile, keyFile := dualUseCert(t, p)
	// Trusting another CA: the dual-use certificate does not verify.
	_, err = SelfClient(serverTLS(t, Config{CertFile: certFile, KeyFile: keyFile, TrustCertFile: p.caFile, ClientAuth: ClientAuthRequire}))
	if !errors.Is(err, ErrSelfClientAuth) {
		t.Fatalf("certificate of an untrusted CA: %v, want ErrSelfClientAuth", err)
	}
	required := serverTLS(t, Config{CertFile: certFile, KeyFile: keyFile, TrustCertFile: filepath.Join(p.dir, "dual-ca.pem"),
		ClientAuth: ClientAuthRequire})
	addr, _ = serve(t, ListenerConfig{Mode: Enforcing, TLS: required})
	client := selfClient(t, required)
	if len(client.Certificates) != 1 {
		t.Fatal("no client certificate presented to a listener that requires one")
	}
	if resp, err := call(addr, client); err != nil || string(resp.Body) != "ping" {
		t.Fatalf("client auth required, dual-use certificate: %v %v", resp, err)
	}
}

func TestSelfClientNoCertificate(t *testing.T) {
	if _, err := SelfClient(&tls.Config{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no certificate: %v", err)
	}
}
