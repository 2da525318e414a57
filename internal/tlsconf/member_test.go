package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"path/filepath"
	"strings"
	"testing"
)

// TestMemberClient: a member trusting the cluster's CA connects to a peer
// whose certificate that CA signed (by chain) and presents its own certificate to a peer that requires one;
// a peer signed by another CA is refused with an error saying so, and a
// dialer without the trusted CA file checks the system's roots, which do
// not hold the cluster's CA.
func TestMemberClient(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caDER := newCA(t, "cluster CA")
	caFile := filepath.Join(dir, "ca.pem")
	writePEM(t, caFile, "CERTIFICATE", caDER)
	other, otherKey, _ := newCA(t, "other CA")
	aCert, aKey := writeMember(t, dir, "a", ca, caKey)
	bCert, bKey := writeMember(t, dir, "b", ca, caKey)
	xCert, xKey := writeMember(t, dir, "x", other, otherKey)

	server := func(cert, key string, auth ClientAuth) *tls.Config {
		return serverTLS(t, Config{CertFile: cert, KeyFile: key, TrustCertFile: caFile, ClientAuth: auth})
	}
	client, err := MemberClient(MemberConfig{CertFile: aCert, KeyFile: aKey, TrustCertFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	// Client certificates are required as TLS servers check them: a leaf
	// for client authentication. Peer certificates of this test are for
	// server authentication only, so the peer verifies by chain (as
	// Peer's server end does).
	mutual := server(bCert, bKey, ClientAuthNone)
	mutual.ClientAuth = tls.RequireAnyClientCert
	var presented bool
	mutual.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
		presented = len(raw) > 0
		return verifyPeer(raw, mutual.RootCAs)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	mutual.RootCAs = pool
	if serr, cerr := handshake(mutual, client); serr != nil || cerr != nil || !presented {
		t.Fatalf("member of the CA, peer requiring a certificate: server %v, client %v, presented %t", serr, cerr, presented)
	}
	if serr, cerr := handshake(server(bCert, bKey, ClientAuthNone), client); serr != nil || cerr != nil {
		t.Fatalf("member of the CA: server %v, client %v", serr, cerr)
	}
	_, cerr := handshake(server(xCert, xKey, ClientAuthNone), client)
	if cerr == nil || !strings.Contains(cerr.Error(), "not signed by a trusted CA") {
		t.Fatalf("peer of another CA: %v, want a refusal naming the CA", cerr)
	}
	system, err := MemberClient(MemberConfig{})
	if err != nil {
		t.Fatal(err)
	}
	system.ServerName = "127.0.0.1"
	if _, cerr := handshake(server(bCert, bKey, ClientAuthNone), system); cerr == nil {
		t.Fatal("a dialer without the members' CA file accepted the cluster's private CA")
	}
	if _, err := MemberClient(MemberConfig{TrustCertFile: filepath.Join(dir, "missing.pem")}); err == nil {
		t.Fatal("a missing CA file was accepted")
	}
	if _, err := MemberClient(MemberConfig{CertFile: aCert, KeyFile: xKey}); err == nil {
		t.Fatal("a key that is not the certificate's was accepted")
	}
}
