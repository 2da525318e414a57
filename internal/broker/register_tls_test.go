package broker

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// selfSigned returns a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "namesrv"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool
}

// startTLSFakeNamesrv is startFakeNamesrv behind a TLS-only listener.
func startTLSFakeNamesrv(t *testing.T, cert tls.Certificate) *fakeNamesrv {
	f := &fakeNamesrv{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln := tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	f.srv = remoting.NewServer(remoting.ServerConfig{}, remoting.HandlerFunc(
		func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
			f.mu.Lock()
			f.regs = append(f.regs, req)
			f.mu.Unlock()
			return req.NewResponse(0, "")
		}))
	go f.srv.Serve(tln)
	f.addr = ln.Addr().String()
	t.Cleanup(func() { f.srv.Shutdown(context.Background()) })
	return f
}

// TestRegistersOverTLS: the broker registers with, and unregisters from, a
// NameServer that accepts TLS only, and at the same time with a plain one,
// each as NamesrvTLS says.
func TestRegistersOverTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	ns := startTLSFakeNamesrv(t, cert)
	plain := startFakeNamesrv(t)
	e := startEnv(t, func(c *Config) {
		c.NamesrvAddrs = []string{ns.addr, plain.addr}
		c.NamesrvTLS = func(addr string) *tls.Config {
			if addr != ns.addr {
				return nil
			}
			return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
	})
	for _, f := range []*fakeNamesrv{ns, plain} {
		waitFor(t, "registration", func() bool { _, n := f.last(remoting.ReqRegisterBroker); return n >= 1 })
	}
	e.shutdown()
	for _, f := range []*fakeNamesrv{ns, plain} {
		if _, n := f.last(remoting.ReqUnregisterBroker); n != 1 {
			t.Fatalf("unregistrations at %s: %d, want 1", f.addr, n)
		}
	}
}
