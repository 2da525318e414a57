package tlsconf

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
)

// pki is a throw-away CA with a server and a client certificate, written
// as PEM files.
type pki struct {
	dir                 string
	caFile              string
	certFile, keyFile   string
	clientCert          tls.Certificate
	roots               *x509.CertPool
	otherCA             string // a CA that signed nothing here
	untrustedClientCert tls.Certificate
}

var serial int64

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func certify(t *testing.T, tmpl, parent *x509.Certificate, pub, priv any) (*x509.Certificate, []byte) {
	t.Helper()
	serial++
	tmpl.SerialNumber = big.NewInt(serial)
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c, der
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

func newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	key := newKey(t)
	ca, der := certify(t, &x509.Certificate{Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}, nil, &key.PublicKey, key)
	return ca, key, der
}

func leaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, usage x509.ExtKeyUsage) (tls.Certificate, []byte, []byte) {
	key := newKey(t)
	_, der := certify(t, &x509.Certificate{Subject: pkix.Name{CommonName: "keel"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}}, ca, &key.PublicKey, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, der, keyDER
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{dir: t.TempDir()}
	ca, caKey, caDER := newCA(t, "test CA")
	p.caFile = filepath.Join(p.dir, "ca.pem")
	writePEM(t, p.caFile, "CERTIFICATE", caDER)
	_, certDER, keyDER := leaf(t, ca, caKey, x509.ExtKeyUsageServerAuth)
	p.certFile, p.keyFile = filepath.Join(p.dir, "server.pem"), filepath.Join(p.dir, "server.key")
	writePEM(t, p.certFile, "CERTIFICATE", certDER)
	writePEM(t, p.keyFile, "EC PRIVATE KEY", keyDER)
	p.clientCert, _, _ = leaf(t, ca, caKey, x509.ExtKeyUsageClientAuth)
	p.roots = x509.NewCertPool()
	p.roots.AddCert(ca)
	other, otherKey, otherDER := newCA(t, "other CA")
	p.otherCA = filepath.Join(p.dir, "other.pem")
	writePEM(t, p.otherCA, "CERTIFICATE", otherDER)
	p.untrustedClientCert, _, _ = leaf(t, other, otherKey, x509.ExtKeyUsageClientAuth)
	return p
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var echo = remoting.HandlerFunc(func(ctx context.Context, c *remoting.Conn, req *remoting.Command) *remoting.Command {
	resp := req.NewResponse(remoting.ResSuccess, "")
	resp.Body = req.Body
	return resp
})

// serve starts a remoting echo server behind Wrap and returns its address
// and log.
func serve(t *testing.T, cfg ListenerConfig) (string, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wl, err := Wrap(ln, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := remoting.NewServer(remoting.ServerConfig{}, echo)
	go srv.Serve(wl)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return ln.Addr().String(), logs
}

func call(addr string, tc *tls.Config) (*remoting.Command, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{TLS: tc})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Invoke(ctx, remoting.NewRequest(remoting.ReqHeartBeat, nil, []byte("ping")))
}

func serverTLS(t *testing.T, c Config) *tls.Config {
	t.Helper()
	tc, err := ServerTLS(c)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

func TestEnforcing(t *testing.T) {
	p := newPKI(t)
	addr, logs := serve(t, ListenerConfig{Mode: Enforcing, TLS: serverTLS(t, Config{CertFile: p.certFile, KeyFile: p.keyFile})})
	resp, err := call(addr, &tls.Config{RootCAs: p.roots})
	if err != nil || string(resp.Body) != "ping" {
		t.Fatalf("TLS client: %v %v", resp, err)
	}
	// The Go client dials with InsecureSkipVerify; that works too.
	if _, err := call(addr, &tls.Config{InsecureSkipVerify: true}); err != nil {
		t.Fatalf("TLS client without verification: %v", err)
	}
	resp, err = call(addr, nil)
	if err != nil {
		t.Fatalf("plain client got no answer: %v", err)
	}
	if resp.Code != remoting.ResSystemError || resp.Remark != PlainRefusedRemark {
		t.Fatalf("plain client answer: %d %q", resp.Code, resp.Remark)
	}
	if !strings.Contains(logs.String(), "plain TCP connection to a TLS-only listener") ||
		!strings.Contains(logs.String(), "first_byte=0x00") {
		t.Fatalf("log: %s", logs)
	}
}

// TestEnforcingGarbage: a plain peer that sends no valid frame is closed
// without an answer.
func TestEnforcingGarbage(t *testing.T) {
	p := newPKI(t)
	addr, _ := serve(t, ListenerConfig{Mode: Enforcing, TLS: serverTLS(t, Config{CertFile: p.certFile, KeyFile: p.keyFile})})
	for _, junk := range [][]byte{[]byte("GET / HTTP/1.1\r\n\r\n"), {0, 0, 0, 2, 1, 2}, {0xff, 0xff, 0xff, 0xff}} {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		nc.SetDeadline(time.Now().Add(5 * time.Second))
		nc.Write(junk)
		var b [1]byte
		if n, err := nc.Read(b[:]); err == nil {
			t.Fatalf("%q: got %d bytes, want the connection closed", junk, n)
		}
		nc.Close()
	}
}

func TestPermissive(t *testing.T) {
	p := newPKI(t)
	addr, _ := serve(t, ListenerConfig{Mode: Permissive, TLS: serverTLS(t, Config{CertFile: p.certFile, KeyFile: p.keyFile})})
	for name, tc := range map[string]*tls.Config{"tls": {RootCAs: p.roots}, "plain": nil} {
		resp, err := call(addr, tc)
		if err != nil || resp.Code != remoting.ResSuccess || string(resp.Body) != "ping" {
			t.Fatalf("%s client: %v %v", name, resp, err)
		}
	}
}

func TestClientAuth(t *testing.T) {
	p := newPKI(t)
	addr, logs := serve(t, ListenerConfig{Mode: Enforcing, TLS: serverTLS(t, Config{CertFile: p.certFile, KeyFile: p.keyFile,
		TrustCertFile: p.caFile, ClientAuth: ClientAuthRequire})})
	if _, err := call(addr, &tls.Config{RootCAs: p.roots, Certificates: []tls.Certificate{p.clientCert}}); err != nil {
		t.Fatalf("client with a trusted certificate: %v", err)
	}
	if _, err := call(addr, &tls.Config{RootCAs: p.roots}); err == nil {
		t.Fatal("client without a certificate was served")
	}
	force := &tls.Config{RootCAs: p.roots, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &p.untrustedClientCert, nil
	}}
	if _, err := call(addr, force); err == nil {
		t.Fatal("client with an untrusted certificate was served")
	}
	waitLog(t, logs, "tls: handshake failed")

	// optional: no certificate is fine, an untrusted one is not.
	addr, _ = serve(t, ListenerConfig{Mode: Enforcing, TLS: serverTLS(t, Config{CertFile: p.certFile, KeyFile: p.keyFile,
		TrustCertFile: p.caFile, ClientAuth: ClientAuthOptional})})
	if _, err := call(addr, &tls.Config{RootCAs: p.roots}); err != nil {
		t.Fatalf("optional, no certificate: %v", err)
	}
	// Go's client withholds a certificate the server's CA list does not
	// name; force it to present one.
	force = &tls.Config{RootCAs: p.roots, GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &p.untrustedClientCert, nil
	}}
	if _, err := call(addr, force); err == nil {
		t.Fatal("optional: an untrusted certificate was accepted")
	}
}

func waitLog(t *testing.T, logs *syncBuf, want string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("log has no %q: %s", want, logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConfigErrors(t *testing.T) {
	p := newPKI(t)
	cases := map[string]Config{
		"no files":           {},
		"missing cert":       {CertFile: filepath.Join(p.dir, "nope.pem"), KeyFile: p.keyFile},
		"key mismatch":       {CertFile: p.caFile, KeyFile: p.keyFile},
		"require without CA": {CertFile: p.certFile, KeyFile: p.keyFile, ClientAuth: ClientAuthRequire},
		"bad client auth":    {CertFile: p.certFile, KeyFile: p.keyFile, ClientAuth: "maybe"},
		"CA file not PEM":    {CertFile: p.certFile, KeyFile: p.keyFile, TrustCertFile: p.keyFile, ClientAuth: ClientAuthRequire},
		"CA file missing":    {CertFile: p.certFile, KeyFile: p.keyFile, TrustCertFile: filepath.Join(p.dir, "x"), ClientAuth: ClientAuthRequire},
	}
	for name, c := range cases {
		if _, err := ServerTLS(c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := ServerTLS(Config{CertFile: p.certFile, KeyFile: p.keyFile, TrustCertFile: p.otherCA}); err != nil {
		t.Errorf("CA without client auth: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if got, err := Wrap(ln, ListenerConfig{Mode: Disabled}); got != ln || err != nil {
		t.Fatalf("disabled: %v %v", got, err)
	}
	if _, err := Wrap(ln, ListenerConfig{Mode: Enforcing}); !errors.Is(err, ErrConfig) {
		t.Fatalf("enforcing without TLS: %v", err)
	}
	if _, err := Wrap(ln, ListenerConfig{Mode: "strict", TLS: &tls.Config{}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("bad mode: %v", err)
	}
	for _, m := range []string{"disabled", "permissive", "enforcing"} {
		if got, err := ParseMode(m); err != nil || string(got) != m {
			t.Fatalf("ParseMode(%s) = %v %v", m, got, err)
		}
	}
	if _, err := ParseMode("on"); !errors.Is(err, ErrConfig) {
		t.Fatalf("ParseMode(on): %v", err)
	}
}
