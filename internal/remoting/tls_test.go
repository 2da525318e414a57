package remoting

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"testing"
	"time"
)

// selfSigned makes a certificate for 127.0.0.1 and a pool trusting it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
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
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func TestTLS(t *testing.T) {
	cert, pool := selfSigned(t)
	_, addr := startServer(t, ServerConfig{TLS: &tls.Config{Certificates: []tls.Certificate{cert}}}, echo)
	cl := dialClient(t, addr, ClientConfig{TLS: &tls.Config{RootCAs: pool}})
	resp := invoke(t, cl, NewRequest(ReqHeartBeat, map[string]string{"k": "v"}, []byte("over tls")))
	if resp.Ext("k") != "v" || string(resp.Body) != "over tls" {
		t.Fatalf("response %v", resp)
	}
	// A plain-TCP client gets no answer from a TLS server; the handshake
	// fails and the connection closes.
	r := dialRaw(t, addr)
	r.send(NewRequest(ReqHeartBeat, nil, nil))
	r.expectClosed()
}
