package tlsconf

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// handshake connects client to server over loopback TCP and exchanges
// one byte each way after the handshake (under TLS 1.3 a client learns
// that the server refused its certificate only on its first read), and
// returns both sides' errors.
func handshake(server, client *tls.Config) (error, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err, err
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		s := tls.Server(c, server)
		if err := s.Handshake(); err != nil {
			errc <- err
			return
		}
		_, err = s.Write([]byte{1})
		errc <- err
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return <-errc, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	tc := tls.Client(c, client)
	cerr := tc.Handshake()
	if cerr == nil {
		_, cerr = tc.Read(make([]byte, 1))
	}
	return <-errc, cerr
}

// writeMember writes a leaf of ca (server-auth usage only) as PEM files
// and returns their paths.
func writeMember(t *testing.T, dir, name string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (string, string) {
	t.Helper()
	_, der, keyDER := leaf(t, ca, caKey, x509.ExtKeyUsageServerAuth)
	cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	writePEM(t, cert, "CERTIFICATE", der)
	writePEM(t, key, "EC PRIVATE KEY", keyDER)
	return cert, key
}

// TestPeerMutual: two members with certificates of the group's CA connect
// both ways; a member whose certificate another CA signed is refused by
// either end, and so is a dialer presenting no certificate.
func TestPeerMutual(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, caDER := newCA(t, "group CA")
	caFile := filepath.Join(dir, "ca.pem")
	writePEM(t, caFile, "CERTIFICATE", caDER)
	other, otherKey, _ := newCA(t, "other CA")
	aCert, aKey := writeMember(t, dir, "a", ca, caKey)
	bCert, bKey := writeMember(t, dir, "b", ca, caKey)
	xCert, xKey := writeMember(t, dir, "x", other, otherKey)

	peer := func(cert, key string) (*tls.Config, *tls.Config) {
		s, c, err := Peer(PeerConfig{CertFile: cert, KeyFile: key, TrustCertFile: caFile})
		if err != nil {
			t.Fatal(err)
		}
		return s, c
	}
	aS, aC := peer(aCert, aKey)
	bS, bC := peer(bCert, bKey)
	xS, xC := peer(xCert, xKey)
	if serr, cerr := handshake(aS, bC); serr != nil || cerr != nil {
		t.Fatalf("a serves b: %v / %v", serr, cerr)
	}
	if serr, cerr := handshake(bS, aC); serr != nil || cerr != nil {
		t.Fatalf("b serves a: %v / %v", serr, cerr)
	}
	if serr, _ := handshake(aS, xC); serr == nil || !strings.Contains(serr.Error(), "not signed by a trusted CA") {
		t.Fatalf("a served an untrusted member: %v", serr)
	}
	if _, cerr := handshake(xS, aC); cerr == nil || !strings.Contains(cerr.Error(), "not signed by a trusted CA") {
		t.Fatalf("a followed an untrusted member: %v", cerr)
	}
	anon := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	if serr, _ := handshake(aS, anon); serr == nil {
		t.Fatal("a served a dialer without a certificate")
	}
}

// TestPeerEncryptOnly: without a trust file, the link is TLS with no
// certificate checked (the shared secret must authenticate), and a
// missing key file is a configuration error.
func TestPeerEncryptOnly(t *testing.T) {
	p := newPKI(t)
	s, c, err := Peer(PeerConfig{CertFile: p.certFile, KeyFile: p.keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if serr, cerr := handshake(s, c); serr != nil || cerr != nil {
		t.Fatalf("%v / %v", serr, cerr)
	}
	if s.ClientAuth != tls.NoClientCert || len(c.Certificates) != 0 {
		t.Fatal("certificates exchanged without a trust file")
	}
	if _, _, err := Peer(PeerConfig{CertFile: p.certFile}); err == nil {
		t.Fatal("no key file accepted")
	}
	if _, _, err := Peer(PeerConfig{CertFile: p.certFile, KeyFile: p.keyFile, TrustCertFile: p.keyFile}); err == nil {
		t.Fatal("a trust file without a certificate accepted")
	}
}
