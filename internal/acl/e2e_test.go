package acl

// End-to-end tests with the official RocketMQ Go client against an
// in-process NameServer and broker whose handler is wrapped by Wrap.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/testcluster"
	"github.com/keelmq/keel/internal/tlsconf"
)

func TestMain(m *testing.M) {
	rlog.SetLogLevel("error")
	os.Exit(m.Run())
}

// e2eACL is the ACL file of the end-to-end cluster; %[1]s is a suffix
// making the topic and group names unique to the test.
const e2eACL = `accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    topicPerms: [Orders%[1]s=PUB, Secret%[1]s=DENY]
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [Orders%[1]s=SUB]
    groupPerms: [Billing%[1]s=SUB]
  - accessKey: admin001
    secretKey: admin-secret
    admin: true
`

type clusterOpts struct {
	acl       string                  // ACL file content; "" = no access control
	brokerTLS *tlsconf.ListenerConfig // nil = plain TCP
	proxy     bool                    // advertise the broker through a capturing proxy
}

// cluster is a NameServer and a broker on loopback ports.
type cluster struct {
	*testcluster.Cluster
	t       *testing.T
	proxy   *captureProxy
	logs    *syncBuf
	tlsDial *tls.Config // for raw clients of a TLS broker
}

func startCluster(t *testing.T, o clusterOpts) *cluster {
	t.Helper()
	log, logs := newLogger()
	c := &cluster{t: t, logs: logs}
	opts := []testcluster.Option{testcluster.WithRemotingLogger(log)}
	if o.acl != "" {
		path := filepath.Join(t.TempDir(), "plain_acl.yml")
		writeFile(t, path, o.acl)
		authz, err := New(Config{Path: path, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		opts = append(opts, testcluster.WithHandler(func(h remoting.Handler) remoting.Handler { return Wrap(h, authz) }))
	}
	if o.brokerTLS != nil {
		opts = append(opts, tlsOptions(t, *o.brokerTLS, log)...)
		c.tlsDial = &tls.Config{InsecureSkipVerify: true}
	}
	if o.proxy {
		opts = append(opts, testcluster.WithAdvertise(func(brokerAddr string) string {
			c.proxy = startProxy(t, brokerAddr)
			return c.proxy.addr()
		}))
	}
	c.Cluster = testcluster.Start(t, opts...)
	return c
}

// tlsOptions serve the broker over TLS. The broker registers over plain
// TCP; TLS clients (the Go client's TLS switch covers its NameServer
// connections too) are served by a permissive NameServer listener.
func tlsOptions(t *testing.T, cfg tlsconf.ListenerConfig, log *slog.Logger) []testcluster.Option {
	nsCfg, brCfg := cfg, cfg
	nsCfg.Mode, nsCfg.Logger = tlsconf.Permissive, log
	brCfg.Logger = log
	return []testcluster.Option{
		testcluster.WithNamesrvListener(func(ln net.Listener) net.Listener { return wrapListener(t, ln, nsCfg) }),
		testcluster.WithBrokerListener(func(ln net.Listener) net.Listener { return wrapListener(t, ln, brCfg) }),
	}
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func wrapListener(t *testing.T, ln net.Listener, cfg tlsconf.ListenerConfig) net.Listener {
	t.Helper()
	w, err := tlsconf.Wrap(ln, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// invoke sends one request with a throw-away remoting client.
func (c *cluster) invoke(addr string, tc *tls.Config, req *remoting.Command) *remoting.Command {
	c.t.Helper()
	resp, err := testcluster.Invoke(addr, tc, req)
	if err != nil {
		c.t.Fatalf("invoke %d at %s: %v", req.Code, addr, err)
	}
	return resp
}

// createTopic creates a topic as the admin account.
func (c *cluster) createTopic(topic string) {
	c.t.Helper()
	req := signed(remoting.ReqUpdateAndCreateTopic, "admin001", "admin-secret", map[string]string{
		"topic": topic, "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, nil)
	if resp := c.invoke(c.BrokerAddr(), c.tlsDial, req); resp.Code != 0 {
		c.t.Fatalf("create topic %s: %d %s", topic, resp.Code, resp.Remark)
	}
	c.WaitRoute(topic)
}

type sender interface {
	SendSync(context.Context, ...*primitive.Message) (*primitive.SendResult, error)
}

func newProducer(t *testing.T, c *cluster, cred primitive.Credentials, opts ...producer.Option) sender {
	t.Helper()
	base := []producer.Option{
		producer.WithNameServer(primitive.NamesrvAddr(c.NamesrvAddrs())), producer.WithGroupName(testcluster.Uniq("pg")),
		producer.WithInstanceName(testcluster.Uniq("p")), producer.WithRetry(0),
		producer.WithSendMsgTimeout(5 * time.Second), producer.WithCredentials(cred),
	}
	p, err := producer.NewDefaultProducer(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Shutdown() })
	return p
}

// consume starts a push consumer and returns the bodies it receives.
func consume(t *testing.T, c *cluster, cred primitive.Credentials, group, topic string, opts ...consumer.Option) <-chan string {
	t.Helper()
	got := make(chan string, 1000)
	base := []consumer.Option{
		consumer.WithNameServer(primitive.NamesrvAddr(c.NamesrvAddrs())), consumer.WithGroupName(group),
		consumer.WithInstance(testcluster.Uniq("c")), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithCredentials(cred),
	}
	pc, err := consumer.NewPushConsumer(append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	err = pc.Subscribe(topic, consumer.MessageSelector{}, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range ms {
			got <- string(m.Body)
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Shutdown() })
	return got
}

func receiveAll(t *testing.T, got <-chan string, want []string) {
	t.Helper()
	need := make(map[string]bool)
	for _, w := range want {
		need[w] = true
	}
	deadline := time.After(30 * time.Second)
	for len(need) > 0 {
		select {
		case b := <-got:
			delete(need, b)
		case <-deadline:
			t.Fatalf("not received: %v", need)
		}
	}
}

var (
	producerCred = primitive.Credentials{AccessKey: "producer1", SecretKey: "producer-secret"}
	consumerCred = primitive.Credentials{AccessKey: "consumer1", SecretKey: "consumer-secret"}
)

// TestE2EAllowedSendAndConsume: a producer and a consumer with the right
// credentials send and receive.
func TestE2EAllowedSendAndConsume(t *testing.T) {
	sfx := testcluster.Uniq("")
	c := startCluster(t, clusterOpts{acl: fmt.Sprintf(e2eACL, sfx)})
	topic := "Orders" + sfx
	c.createTopic(topic)
	p := newProducer(t, c, producerCred)
	var bodies []string
	for i := range 5 {
		body := fmt.Sprintf("order-%d", i)
		res, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte(body)))
		if err != nil || res.Status != primitive.SendOK {
			t.Fatalf("send %d: %v %v", i, res, err)
		}
		bodies = append(bodies, body)
	}
	receiveAll(t, consume(t, c, consumerCred, "Billing"+sfx, topic), bodies)
}

// TestE2EDenied: a topic the account may not publish to, a wrong secret
// and missing credentials all get NO_PERMISSION; each denial is logged
// with the access key and never the secret.
func TestE2EDenied(t *testing.T) {
	sfx := testcluster.Uniq("")
	c := startCluster(t, clusterOpts{acl: fmt.Sprintf(e2eACL, sfx)})
	secret := "Secret" + sfx
	c.createTopic(secret)
	p := newProducer(t, c, producerCred)
	_, err := p.SendSync(context.Background(), primitive.NewMessage(secret, []byte("x")))
	wantErr(t, err, "no PUB permission on topic "+secret)

	wrong := newProducer(t, c, primitive.Credentials{AccessKey: "producer1", SecretKey: "guessed-secret"})
	_, err = wrong.SendSync(context.Background(), primitive.NewMessage("Orders"+sfx, []byte("x")))
	wantErr(t, err, "signature mismatch")

	// A consumer may not publish.
	cp := newProducer(t, c, consumerCred)
	_, err = cp.SendSync(context.Background(), primitive.NewMessage("Orders"+sfx, []byte("x")))
	wantErr(t, err, "no PUB permission")

	// No credentials at all (a raw request, as a client without
	// WithCredentials sends it).
	resp := c.invoke(c.BrokerAddr(), nil, remoting.NewRequest(remoting.ReqGetBrokerRuntimeInfo, nil, nil))
	if resp.Code != remoting.ResNoPermission {
		t.Fatalf("unsigned request: %d %s", resp.Code, resp.Remark)
	}
	logs := c.logs.String()
	for _, want := range []string{"accessKey=producer1", "accessKey=consumer1", "acl: request denied", "remote=127.0.0.1:"} {
		if !bytes.Contains([]byte(logs), []byte(want)) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	for _, s := range []string{"producer-secret", "guessed-secret", "consumer-secret"} {
		if bytes.Contains([]byte(logs), []byte(s)) {
			t.Fatalf("secret %q in the log", s)
		}
	}
	if max := c.Store().MaxOffset(secret, 0); max != 0 {
		t.Fatalf("a denied send was stored: max offset %d", max)
	}
}

// TestE2EDeniedConsumer: a consumer whose group is not allowed never gets
// a message.
func TestE2EDeniedConsumer(t *testing.T) {
	sfx := testcluster.Uniq("")
	c := startCluster(t, clusterOpts{acl: fmt.Sprintf(e2eACL, sfx)})
	topic := "Orders" + sfx
	c.createTopic(topic)
	p := newProducer(t, c, producerCred)
	if _, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("m"))); err != nil {
		t.Fatal(err)
	}
	got := consume(t, c, consumerCred, "Other"+sfx, topic)
	// The consumer's heartbeat for group Other is refused; wait until the
	// broker logged that, then make sure nothing was delivered.
	testcluster.WaitFor(t, 20*time.Second, "the group's heartbeat to be denied", func() bool {
		return bytes.Contains([]byte(c.logs.String()), []byte("no SUB permission on group Other"+sfx))
	})
	select {
	case b := <-got:
		t.Fatalf("denied consumer received %q", b)
	default:
	}
}

func wantErr(t *testing.T, err error, substr string) {
	t.Helper()
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte(substr)) {
		t.Fatalf("err %v, want one containing %q", err, substr)
	}
}

// TestE2ECapturedRequest captures the Go client's signed SEND_MESSAGE on
// the wire. Altered (another topic, another body) it is refused. Replayed
// unchanged it is accepted and stored again: ACL 1.0 signs no timestamp or
// nonce, so it has no replay protection (docs/security.md).
func TestE2ECapturedRequest(t *testing.T) {
	sfx := testcluster.Uniq("")
	c := startCluster(t, clusterOpts{acl: fmt.Sprintf(e2eACL, sfx), proxy: true})
	topic := "Orders" + sfx
	c.createTopic(topic)
	p := newProducer(t, c, producerCred)
	if _, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("pay 10"))); err != nil {
		t.Fatal(err)
	}
	frame := c.proxy.find(t, func(cmd *remoting.Command) bool {
		return cmd.Code == remoting.ReqSendMessage && cmd.ExtFields["topic"] == topic
	})
	testcluster.WaitFor(t, 5*time.Second, "the message to be stored", func() bool { return c.Store().MaxOffset(topic, 0) == 1 })

	tamper := func(f func(*remoting.Command)) *remoting.Command {
		cmd, err := remoting.DecodeFrame(bytes.Clone(frame))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Body = bytes.Clone(cmd.Body)
		f(cmd)
		out, err := remoting.EncodeFrame(nil, cmd)
		if err != nil {
			t.Fatal(err)
		}
		return rawExchange(t, c.BrokerAddr(), out)
	}
	for name, f := range map[string]func(*remoting.Command){
		"topic": func(cmd *remoting.Command) { cmd.ExtFields["topic"] = "Secret" + sfx },
		"body":  func(cmd *remoting.Command) { cmd.Body = []byte("pay 99") },
		"queue": func(cmd *remoting.Command) { cmd.ExtFields["queueId"] = "1" },
	} {
		resp := tamper(f)
		if resp.Code != remoting.ResNoPermission || !bytes.Contains([]byte(resp.Remark), []byte("signature mismatch")) {
			t.Errorf("tampered %s: %d %q", name, resp.Code, resp.Remark)
		}
	}

	resp := rawExchange(t, c.BrokerAddr(), frame)
	if resp.Code != remoting.ResSuccess {
		t.Fatalf("replayed request: %d %s", resp.Code, resp.Remark)
	}
	testcluster.WaitFor(t, 5*time.Second, "the replayed copy to be stored", func() bool { return c.Store().MaxOffset(topic, 0) == 2 })
}

// rawExchange writes one frame on a new connection and reads one answer.
func rawExchange(t *testing.T, addr string, frame []byte) *remoting.Command {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := nc.Write(frame); err != nil {
		t.Fatal(err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		t.Fatalf("read answer: %v", err)
	}
	buf := make([]byte, 4+binary.BigEndian.Uint32(hdr[:]))
	copy(buf, hdr[:])
	if _, err := io.ReadFull(nc, buf[4:]); err != nil {
		t.Fatal(err)
	}
	resp, err := remoting.DecodeFrame(buf)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// captureProxy forwards TCP to a target and records what clients send.
type captureProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	sent   []*bytes.Buffer // per connection, client to server
}

func startProxy(t *testing.T, target string) *captureProxy {
	p := &captureProxy{ln: listenLoopback(t), target: target}
	go p.serve()
	t.Cleanup(func() { p.ln.Close() })
	return p
}

func (p *captureProxy) addr() string { return p.ln.Addr().String() }

func (p *captureProxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		rec := &lockedWriter{mu: &p.mu, b: &bytes.Buffer{}}
		p.mu.Lock()
		p.sent = append(p.sent, rec.b)
		p.mu.Unlock()
		go func() { io.Copy(out, io.TeeReader(in, rec)); out.Close() }()
		go func() { io.Copy(in, out); in.Close() }()
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// find returns the first complete captured frame whose command matches.
func (p *captureProxy) find(t *testing.T, match func(*remoting.Command) bool) []byte {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.sent {
		data := b.Bytes()
		for len(data) >= 4 {
			n := 4 + int(binary.BigEndian.Uint32(data))
			if n > len(data) {
				break
			}
			frame := bytes.Clone(data[:n])
			data = data[n:]
			if cmd, err := remoting.DecodeFrame(bytes.Clone(frame)); err == nil && match(cmd) {
				return frame
			}
		}
	}
	t.Fatal("no matching request captured")
	return nil
}

// selfSignedFiles writes a certificate for 127.0.0.1 and its key.
func selfSignedFiles(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))
	return certFile, keyFile
}

func enforcingTLS(t *testing.T) *tlsconf.ListenerConfig {
	t.Helper()
	cert, key := selfSignedFiles(t, t.TempDir())
	tc, err := tlsconf.ServerTLS(tlsconf.Config{CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	return &tlsconf.ListenerConfig{TLS: tc, Mode: tlsconf.Enforcing}
}

// TestE2EPlainClientAgainstTLS: a Go client without TLS sending to a
// TLS-only broker gets a clear error, and the broker logs why.
func TestE2EPlainClientAgainstTLS(t *testing.T) {
	sfx := testcluster.Uniq("")
	c := startCluster(t, clusterOpts{acl: fmt.Sprintf(e2eACL, sfx), brokerTLS: enforcingTLS(t)})
	topic := "Orders" + sfx
	c.createTopic(topic)
	p := newProducer(t, c, producerCred)
	_, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("x")))
	wantErr(t, err, tlsconf.PlainRefusedRemark)
	if !bytes.Contains([]byte(c.logs.String()), []byte("plain TCP connection to a TLS-only listener")) {
		t.Fatalf("no server log:\n%s", c.logs)
	}
}

// tlsChildEnv marks the child process of TestE2ETLS.
const tlsChildEnv = "KEEL_ACL_TLS_CHILD"

// TestE2ETLS runs TestE2ETLSChild in a child process: the Go client's TLS
// switch (WithTls) sets a process-wide default, which must not leak into
// the other tests.
func TestE2ETLS(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := execCommand(ctx, exe, "-test.run=^TestE2ETLSChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), tlsChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestE2ETLSChild")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

// TestE2ETLSChild: producer and consumer with WithTls(true) and credentials
// against a TLS-only broker (and a permissive NameServer).
func TestE2ETLSChild(t *testing.T) {
	if os.Getenv(tlsChildEnv) != "1" {
		t.Skip("runs as the child process of TestE2ETLS")
	}
	sfx := testcluster.Uniq("")
	c := startCluster(t, clusterOpts{acl: fmt.Sprintf(e2eACL, sfx), brokerTLS: enforcingTLS(t)})
	topic := "Orders" + sfx
	c.createTopic(topic)
	p := newProducer(t, c, producerCred, producer.WithTls(true))
	res, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("over tls")))
	if err != nil || res.Status != primitive.SendOK {
		t.Fatalf("send over TLS: %v %v", res, err)
	}
	receiveAll(t, consume(t, c, consumerCred, "Billing"+sfx, topic, consumer.WithTls(true)), []string{"over tls"})
	if bytes.Contains([]byte(c.logs.String()), []byte("plain TCP connection")) {
		t.Fatalf("a client connection was plain:\n%s", c.logs)
	}
}

func execCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, name, args...)
}
