package replication

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/store"
	"github.com/keelmq/keel/internal/tlsconf"
	"github.com/keelmq/keel/internal/vfs"
)

var (
	goodSecret = []byte("the group's secret, 32 bytes ok!")
	badSecret  = []byte("a stranger's guess of the secret")
)

// secretBody is stored on the master before strangers connect: no byte
// of it may reach them.
const secretBody = "confidential-body-7f3a"

// authMaster starts a SYNC_MASTER (minInSyncReplicas 2) with the given
// protections on a loopback port, its log holding secretBody, and
// returns it with its log.
func authMaster(t *testing.T, secret []byte, tc *tls.Config) (*pair, *syncBuffer) {
	t.Helper()
	return authMasterTimeout(t, secret, tc, 300*time.Millisecond)
}

// authMasterTimeout is authMaster with the given AuthTimeout.
func authMasterTimeout(t *testing.T, secret []byte, tc *tls.Config, timeout time.Duration) (*pair, *syncBuffer) {
	t.Helper()
	fs := vfs.NewMem()
	st := openStore(t, (*pair)(nil).masterStoreConfig(fs))
	logs := &syncBuffer{}
	m, err := NewMaster(MasterConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", Sync: true,
		MinInSyncReplicas: 1, AckTimeout: time.Second, HeartbeatInterval: 50 * time.Millisecond,
		Secret: secret, TLS: tc, AuthTimeout: timeout, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Serve(ctx, ln); close(done) }()
	p := &pair{master: st, m: m, addr: ln.Addr().String()}
	p.stopMaster = func() { cancel(); <-done; st.Close() }
	t.Cleanup(p.stopMaster)
	if r := st.PutMessage(context.Background(), msg("T", secretBody)); !r.OK() {
		t.Fatalf("put: %v %v", r.Status, r.Err)
	}
	return p, logs
}

// authSlave starts replica id of the master at addr with the given
// protections and returns its store and its log; the replica stops at the
// end of the test (and must not have stopped by itself).
func authSlave(t *testing.T, addr string, id int64, secret []byte, tc *tls.Config) (*store.Store, *syncBuffer) {
	t.Helper()
	fs := vfs.NewMem()
	cfg := storeConfig(fs)
	cfg.Replica = true
	st := openStore(t, cfg)
	logs := &syncBuffer{}
	s, err := NewSlave(SlaveConfig{Store: st, FS: fs, DataDir: "/data", BrokerName: "broker-a", BrokerID: id,
		MasterAddr: addr, SyncFlush: true, HeartbeatInterval: 50 * time.Millisecond, RetryInterval: 20 * time.Millisecond,
		Secret: secret, TLS: tc, AuthTimeout: 300 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("replica %d: %v", id, err)
		}
		st.Close()
	})
	return st, logs
}

// strangerRead reads everything the master sends a connection after
// out was written (until the master closes it), failing after 5 s.
func strangerRead(t *testing.T, addr string, out []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if len(out) > 0 {
		if _, err := c.Write(out); err != nil {
			t.Fatal(err)
		}
	}
	got, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the master kept the connection open past its authentication deadline (read %d bytes)", len(got))
	}
	return got
}

// frameTypes lists the types of the frames in b (which must parse).
func frameTypes(t *testing.T, b []byte) []byte {
	t.Helper()
	var types []byte
	r := bufio.NewReader(bytes.NewReader(b))
	for {
		typ, _, _, err := readFrame(r, DefaultMaxFrameBytes, nil)
		if err == io.EOF {
			return types
		}
		if err != nil {
			t.Fatalf("the master sent a stranger bytes that are not frames (%v): %q", err, b)
		}
		types = append(types, typ)
	}
}

// noCommitLog fails if got holds any frame but a refusal (or the
// challenge when allowed) or any byte of the master's log.
func noCommitLog(t *testing.T, what string, got []byte, challenge bool) {
	t.Helper()
	if bytes.Contains(got, []byte(secretBody)) {
		t.Fatalf("%s: the stranger received the message body", what)
	}
	for _, typ := range frameTypes(t, got) {
		if typ != typeReject && (typ != typeChallenge || !challenge) {
			t.Fatalf("%s: the stranger received a frame of type %d: %q", what, typ, got)
		}
	}
}

// TestStrangerGetsNothing: with haAuthSecret set, a peer that does not
// prove the secret — silent, an old-style HELLO, garbage, a wrong proof,
// a replayed genuine exchange — is closed having received no byte of the
// log (only a refusal, or the challenge), within the authentication
// deadline, and the master logs each refusal.
func TestStrangerGetsNothing(t *testing.T) {
	p, logs := authMaster(t, goodSecret, nil)
	h := hello{Version: protocolVersion, BrokerName: "broker-a", BrokerID: 7, SegmentBytes: p.master.SegmentBytes()}

	// A frame longer than the pre-authentication bound is refused when its
	// length is read, not after waiting for its bytes.
	huge := binary.BigEndian.AppendUint32(nil, 1<<20)
	noCommitLog(t, "huge frame", strangerRead(t, p.addr, append(huge, typeAuth)), false)
	waitUntil(t, "the refusal of the huge frame", func() bool {
		return strings.Contains(logs.String(), "length 1048576 outside [5, 64]")
	})
	noCommitLog(t, "silent", strangerRead(t, p.addr, nil), false)
	got := strangerRead(t, p.addr, appendFrame(nil, typeHello, h.encode()))
	noCommitLog(t, "plain hello", got, false)
	if !bytes.Contains(got, []byte("requires authentication")) {
		t.Fatalf("a plain HELLO got no refusal naming the cause: %q", got)
	}
	noCommitLog(t, "garbage", strangerRead(t, p.addr, []byte("GET / HTTP/1.1\r\n\r\n")), false)

	// A wrong proof: the exchange run with another secret.
	nonceR := bytes.Repeat([]byte{9}, nonceBytes)
	got = exchange(t, p.addr, badSecret, nonceR, nil)
	noCommitLog(t, "wrong secret", got, true)
	if !bytes.Contains(got, []byte("authentication failed")) {
		t.Fatalf("a wrong proof got no refusal: %q", got)
	}

	// A genuine exchange, recorded, then replayed on a new connection:
	// the master's nonce is new, so the recorded proof fails.
	var proofSent []byte
	exchange(t, p.addr, goodSecret, nonceR, &proofSent)
	got = replay(t, p.addr, nonceR, proofSent)
	noCommitLog(t, "replayed proof", got, true)

	waitUntil(t, "the master's refusal lines", func() bool {
		return strings.Contains(logs.String(), "refused a connection that did not authenticate")
	})
	if s := logs.String(); strings.Contains(s, "replica connected") || strings.Contains(s, string(goodSecret)) {
		t.Fatalf("master log:\n%s", s)
	}
}

// exchange runs the replica's side of the authentication with secret and
// nonceR, and returns what the master sent after the proof (AUTH_OK or a
// refusal) — the connection is closed right after. The proof sent is
// stored in *proofOut if given.
func exchange(t *testing.T, addr string, secret, nonceR []byte, proofOut *[]byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if err := writeFrame(c, typeAuth, append([]byte{methodHMAC}, nonceR...)); err != nil {
		t.Fatal(err)
	}
	typ, nonceM, _, err := readFrame(r, maxAuthAnswerBytes, nil)
	if err != nil || typ != typeChallenge {
		t.Fatalf("no challenge: type %d, %v", typ, err)
	}
	pr := proof(secret, labelReplica, nil, nonceR, nonceM)
	if proofOut != nil {
		*proofOut = pr
	}
	if err := writeFrame(c, typeProof, pr); err != nil {
		t.Fatal(err)
	}
	typ, p, _, err := readFrame(r, maxAuthAnswerBytes, nil)
	if err != nil {
		t.Fatalf("no answer to the proof: %v", err)
	}
	if bytes.Equal(secret, goodSecret) != (typ == typeAuthOK) {
		t.Fatalf("proof with secret %q answered with type %d", secret, typ)
	}
	if typ == typeAuthOK && !bytes.Equal(p, proof(secret, labelMaster, nil, nonceR, nonceM)) {
		t.Fatal("the master's proof does not verify")
	}
	return appendFrame(nil, typ, p)
}

// replay sends a recorded AUTH and PROOF without reading the challenge
// first, and returns everything the master sent.
func replay(t *testing.T, addr string, nonceR, recorded []byte) []byte {
	out := appendFrame(nil, typeAuth, append([]byte{methodHMAC}, nonceR...))
	out = appendFrame(out, typeProof, recorded)
	got := strangerRead(t, addr, out)
	if !bytes.Contains(got, []byte("authentication failed")) {
		t.Fatalf("a replayed proof was not refused: %q", got)
	}
	return got
}

// TestStrangerFloodLogsRateLimited: many refused connections in a burst
// give a bounded number of log lines, the later ones counting what was
// suppressed.
func TestStrangerFloodLogsRateLimited(t *testing.T) {
	p, logs := authMaster(t, goodSecret, nil)
	const n = 60
	start := time.Now()
	for range n {
		strangerRead(t, p.addr, []byte("garbage garbage garbage"))
	}
	waitUntil(t, "the refusal lines", func() bool { return strings.Contains(logs.String(), "did not authenticate") })
	lines := strings.Count(logs.String(), "did not authenticate")
	if budget := refusalLogBurst + int(time.Since(start)/refusalLogInterval) + 1; lines > budget {
		t.Fatalf("%d refusals logged %d lines, more than the budget of %d", n, lines, budget)
	}
	// A line after the interval counts the suppressed ones.
	time.Sleep(refusalLogInterval) // the limiter's own interval, not a wait for a condition
	strangerRead(t, p.addr, []byte("garbage garbage garbage"))
	waitUntil(t, "a line counting the suppressed refusals", func() bool { return strings.Contains(logs.String(), "suppressed=") })
}

// TestWrongSecretReplicaRefused: a replica with another secret, and one
// with none, are refused — both sides say so in their logs, and neither
// writes a byte — while the master goes on serving the replica that knows
// the secret.
func TestWrongSecretReplicaRefused(t *testing.T) {
	p, mlogs := authMaster(t, goodSecret, nil)
	good, _ := authSlave(t, p.addr, 1, goodSecret, nil)
	bad, blogs := authSlave(t, p.addr, 2, badSecret, nil)
	none, nlogs := authSlave(t, p.addr, 3, nil, nil)
	waitUntil(t, "the good replica's copy", func() bool {
		return good.Offset(store.Flushed) == p.master.Offset(store.Written)
	})
	waitUntil(t, "both refusals on the replicas", func() bool {
		return strings.Contains(blogs.String(), "authentication failed") && strings.Contains(nlogs.String(), "requires authentication")
	})
	waitUntil(t, "the master's refusal line", func() bool {
		return strings.Contains(mlogs.String(), "wrong proof") && strings.Contains(mlogs.String(), "without authenticating")
	})
	if w := bad.Offset(store.Written) + none.Offset(store.Written); w != 0 {
		t.Fatalf("refused replicas wrote %d bytes", w)
	}
	putN(t, p.master, "after", 20)
	waitUntil(t, "the good replica to follow", func() bool {
		return good.Offset(store.Flushed) == p.master.Offset(store.Written)
	})
	if st := p.m.State(time.Now()); len(st.Replicas) != 1 || st.Replicas[0].BrokerID != 1 || !st.Replicas[0].InSync {
		t.Fatalf("replicas %+v", st.Replicas)
	}
	if w := bad.Offset(store.Written) + none.Offset(store.Written); w != 0 {
		t.Fatalf("refused replicas wrote %d bytes", w)
	}
}

// TestReplicaRefusesImpostorMaster: a replica refuses a "master" that
// cannot prove the secret (it answers the challenge with a made-up MAC,
// then would send data) and writes nothing.
func TestReplicaRefusesImpostorMaster(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				readFrame(r, maxAuthFrameBytes, nil) // AUTH
				writeFrame(c, typeChallenge, bytes.Repeat([]byte{1}, nonceBytes))
				readFrame(r, maxAuthFrameBytes, nil) // PROOF
				writeFrame(c, typeAuthOK, bytes.Repeat([]byte{2}, macBytes))
				writeFrame(c, typeHelloOK, helloOK{Epochs: History{{Epoch: 1}}}.encode())
				io.Copy(io.Discard, r)
			}()
		}
	}()
	st, logs := authSlave(t, ln.Addr().String(), 1, goodSecret, nil)
	waitUntil(t, "the replica's refusal", func() bool {
		return strings.Contains(logs.String(), "the master's proof does not verify")
	})
	if w := st.Offset(store.Written); w != 0 {
		t.Fatalf("the replica wrote %d bytes from an impostor", w)
	}
}

// TestTLSLink: the link runs over mutual TLS (the group's CA): the
// replica follows; a plain-TCP replica and a stranger are refused by the
// TLS listener with nothing of the log; a replica whose certificate
// another CA signed is refused too. With a secret as well, the proof is
// bound to the TLS session.
func TestTLSLink(t *testing.T) {
	for _, secret := range [][]byte{nil, goodSecret} {
		t.Run(map[bool]string{false: "mtls", true: "mtls+secret"}[secret != nil], func(t *testing.T) {
			grp := newTestPKI(t)
			ms, _ := grp.member(t, "master", grp.ca)
			p, mlogs := authMaster(t, secret, ms)
			_, sc := grp.member(t, "slave", grp.ca)
			good, _ := authSlave(t, p.addr, 1, secret, sc)
			waitUntil(t, "the TLS replica's copy", func() bool {
				return good.Offset(store.Flushed) == p.master.Offset(store.Written)
			})

			plain, plogs := authSlave(t, p.addr, 2, secret, nil)
			_, xc := grp.member(t, "stranger", grp.other)
			untrusted, _ := authSlave(t, p.addr, 3, secret, xc)
			got := strangerRead(t, p.addr, appendFrame(nil, typeHello, hello{Version: protocolVersion, BrokerName: "broker-a", BrokerID: 9}.encode()))
			if bytes.Contains(got, []byte(secretBody)) || len(got) > 16 {
				t.Fatalf("a plain stranger got %q from a TLS listener", got)
			}
			waitUntil(t, "the master's TLS refusals", func() bool {
				return strings.Count(mlogs.String(), "TLS handshake failed") >= 1
			})
			waitUntil(t, "the plain replica's failure", func() bool {
				return strings.Contains(plogs.String(), "link to master lost") || strings.Contains(plogs.String(), "authentication failed")
			})
			putN(t, p.master, "after", 10)
			waitUntil(t, "the TLS replica to follow", func() bool {
				return good.Offset(store.Flushed) == p.master.Offset(store.Written)
			})
			if w := plain.Offset(store.Written) + untrusted.Offset(store.Written); w != 0 {
				t.Fatalf("refused replicas wrote %d bytes", w)
			}
			if st := p.m.State(time.Now()); len(st.Replicas) != 1 || st.Replicas[0].BrokerID != 1 {
				t.Fatalf("replicas %+v", st.Replicas)
			}
		})
	}
}

// TestTLSRelayRefused: with TLS that checks no certificate and a
// secret, someone who terminates the replica's TLS session and relays the
// exchange over a session of its own to the master fails: the proofs are
// bound to each TLS session, so neither end accepts the other's.
func TestTLSRelayRefused(t *testing.T) {
	grp := newTestPKI(t)
	ms, _ := grp.memberTrusting(t, "master", grp.ca, "")
	p, mlogs := authMaster(t, goodSecret, ms)
	rs, _ := grp.memberTrusting(t, "relay", grp.other, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				in := tls.Server(c, rs)
				defer in.Close()
				up, err := tls.Dial("tcp", p.addr, &tls.Config{InsecureSkipVerify: true})
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, in)
				io.Copy(in, up)
			}()
		}
	}()
	_, sc := grp.memberTrusting(t, "slave", grp.ca, "")
	st, slogs := authSlave(t, ln.Addr().String(), 1, goodSecret, sc)
	waitUntil(t, "the master's refusal of the relayed proof", func() bool {
		return strings.Contains(mlogs.String(), "wrong proof")
	})
	waitUntil(t, "the replica's refusal", func() bool { return strings.Contains(slogs.String(), "authentication failed") })
	if w := st.Offset(store.Written); w != 0 {
		t.Fatalf("the relayed replica wrote %d bytes", w)
	}
	if strings.Contains(mlogs.String(), "replica connected") {
		t.Fatal("the master served a relayed replica")
	}
}

// testPKI is a group CA and another CA, for member certificates.
type testPKI struct {
	dir             string
	caFile          string
	ca, other       *x509.Certificate
	caKey, otherKey *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) *testPKI {
	p := &testPKI{dir: t.TempDir()}
	var caDER []byte
	p.ca, p.caKey, caDER = testCA(t, "group CA")
	p.other, p.otherKey, _ = testCA(t, "other CA")
	p.caFile = filepath.Join(p.dir, "ca.pem")
	writeTestPEM(t, p.caFile, "CERTIFICATE", caDER)
	return p
}

var testSerial int64

func testCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey, []byte) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testSerial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(testSerial), Subject: pkix.Name{CommonName: name}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key, der
}

// member issues a certificate from ca (the group's or the other) and
// returns the server and client configurations tlsconf.Peer makes of it,
// trusting the group's CA.
func (p *testPKI) member(t *testing.T, name string, ca *x509.Certificate) (*tls.Config, *tls.Config) {
	t.Helper()
	return p.memberTrusting(t, name, ca, p.caFile)
}

// memberTrusting is member with trust as the trusted CA file ("": none,
// encryption only).
func (p *testPKI) memberTrusting(t *testing.T, name string, ca *x509.Certificate, trust string) (*tls.Config, *tls.Config) {
	t.Helper()
	caKey := p.caKey
	if ca == p.other {
		caKey = p.otherKey
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	testSerial++
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(testSerial), Subject: pkix.Name{CommonName: name},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile := filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+".key")
	writeTestPEM(t, certFile, "CERTIFICATE", der)
	writeTestPEM(t, keyFile, "EC PRIVATE KEY", keyDER)
	s, c, err := tlsconf.Peer(tlsconf.PeerConfig{CertFile: certFile, KeyFile: keyFile, TrustCertFile: trust})
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func writeTestPEM(t *testing.T, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSecretOnReplicaOnly: a master without a secret refuses a replica
// that authenticates with one (the configurations differ), saying so on
// both sides, rather than serving it unauthenticated.
func TestSecretOnReplicaOnly(t *testing.T) {
	p, mlogs := authMaster(t, nil, nil)
	st, slogs := authSlave(t, p.addr, 1, goodSecret, nil)
	waitUntil(t, "the refusal on both sides", func() bool {
		return strings.Contains(slogs.String(), "this master has no haAuthSecret") &&
			strings.Contains(mlogs.String(), "this master has no haAuthSecret")
	})
	if w := st.Offset(store.Written); w != 0 {
		t.Fatalf("the replica wrote %d bytes", w)
	}
}

// TestPendingAuthBounded: the master holds at most maxPendingAuth
// connections that have not authenticated; one more is closed at once
// (long before the authentication deadline), and logged.
func TestPendingAuthBounded(t *testing.T) {
	p, logs := authMasterTimeout(t, goodSecret, nil, time.Minute)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range maxPendingAuth {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Every held connection is accepted (and holds a token) before the
	// next one is judged: wait until one more is refused.
	waitUntil(t, "a connection beyond the bound refused", func() bool {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err = c.Read(make([]byte, 1))
		return err == io.EOF
	})
	if !strings.Contains(logs.String(), "too many connections are authenticating") {
		t.Fatalf("no log line for the refused connection:\n%s", logs.String())
	}
	// Once the held connections go, strangers are judged again (closed
	// at their own deadline, not at once): the bound is a count, not a ban.
	for _, c := range held {
		c.Close()
	}
	held = nil
	waitUntil(t, "room again", func() bool {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err = c.Read(make([]byte, 1))
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout() // held open, waiting for its AUTH
	})
}
