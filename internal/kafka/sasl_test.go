package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/keelmq/keel/internal/acl"
	kafkago "github.com/segmentio/kafka-go"
	kgsasl "github.com/segmentio/kafka-go/sasl"
	kgplain "github.com/segmentio/kafka-go/sasl/plain"
	kgscram "github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

const testACL = `
accounts:
  - accessKey: producer1
    secretKey: producer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [orders=PUB, audit=PUB|SUB]
  - accessKey: consumer1
    secretKey: consumer-secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [orders=SUB]
    groupPerms: [billing=SUB]
  - accessKey: admin01
    secretKey: admin-secret
    admin: true
`

func startACLNode(t testing.TB) *testNode {
	t.Helper()
	rules, err := acl.Parse("plain_acl.yml", []byte(testACL))
	if err != nil {
		t.Fatal(err)
	}
	a := acl.NewWithRules(rules, slog.New(slog.NewTextHandler(io.Discard, nil)))
	return startNodeWith(t, nil, Config{ACL: testAccounts{a}})
}

// testAccounts is the ACL as Accounts (cmd/keel has the same adapter).
type testAccounts struct{ a *acl.Authorizer }

func (k testAccounts) Trusted(remote net.Addr) bool { return k.a.Trusted(remote) }
func (k testAccounts) Authenticate(user, password string) bool {
	return k.a.Authenticate(user, password) != nil
}
func (k testAccounts) Secret(user string) (string, bool) {
	if acct := k.a.Account(user); acct != nil {
		return acct.SecretKey(), true
	}
	return "", false
}
func (k testAccounts) Admin(user string) bool {
	acct := k.a.Account(user)
	return acct != nil && acct.Admin
}
func (k testAccounts) MayTopic(user, topic string, need Perm) bool {
	acct := k.a.Account(user)
	return acct != nil && acct.MayTopic(topic, map[Perm]acl.Perm{PermPub: acl.Pub, PermSub: acl.Sub, PermAny: acl.Any}[need])
}
func (k testAccounts) MayGroup(user, group string, need Perm) bool {
	acct := k.a.Account(user)
	return acct != nil && acct.MayGroup(group, map[Perm]acl.Perm{PermPub: acl.Pub, PermSub: acl.Sub, PermAny: acl.Any}[need])
}

func saslClient(t *testing.T, addr string, m sasl.Mechanism, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	all := append([]kgo.Opt{kgo.SeedBrokers(addr), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RetryTimeout(2 * time.Second)}, opts...)
	if m != nil {
		all = append(all, kgo.SASL(m))
	}
	cl, err := kgo.NewClient(all...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestSASLMechanisms: franz-go authenticates with PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512 as a Keel account and produces; a wrong password, an
// unknown user and a client without SASL are refused.
func TestSASLMechanisms(t *testing.T) {
	n := startACLNode(t)
	ctx := ctx30(t)
	admin := saslClient(t, n.addr, plain.Auth{User: "admin01", Pass: "admin-secret"}.AsMechanism())
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	for _, m := range []sasl.Mechanism{
		plain.Auth{User: "producer1", Pass: "producer-secret"}.AsMechanism(),
		scram.Auth{User: "producer1", Pass: "producer-secret"}.AsSha256Mechanism(),
		scram.Auth{User: "producer1", Pass: "producer-secret"}.AsSha512Mechanism(),
	} {
		cl := saslClient(t, n.addr, m)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte(m.Name())}).FirstErr(); err != nil {
			t.Fatalf("%s: %v", m.Name(), err)
		}
	}
	for _, m := range []sasl.Mechanism{
		plain.Auth{User: "producer1", Pass: "wrong-secret"}.AsMechanism(),
		scram.Auth{User: "producer1", Pass: "wrong-secret"}.AsSha256Mechanism(),
		scram.Auth{User: "nobody00", Pass: "producer-secret"}.AsSha512Mechanism(),
	} {
		cl := saslClient(t, n.addr, m)
		err := cl.Ping(ctx)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Fatalf("%s with bad credentials: %v, want SASL_AUTHENTICATION_FAILED", m.Name(), err)
		}
	}
	cl := saslClient(t, n.addr, nil)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := cl.ProduceSync(short, &kgo.Record{Topic: "orders", Value: []byte("x")}).FirstErr(); err == nil {
		t.Fatal("a client without SASL produced")
	}
	if e := n.st.MaxOffset("orders", 0); e != 3 {
		t.Fatalf("%d batches stored, want the 3 authenticated ones", e)
	}
}

// TestACLPermissions: a producer may produce to its topics only, a
// consumer may read its topic in its group only, and only an admin
// creates topics; denied parts of a request get the authorization
// errors, the rest is served.
func TestACLPermissions(t *testing.T) {
	n := startACLNode(t)
	ctx := ctx30(t)
	admin := saslClient(t, n.addr, scram.Auth{User: "admin01", Pass: "admin-secret"}.AsSha256Mechanism())
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "secret"); err != nil {
		t.Fatal(err)
	}
	prod := saslClient(t, n.addr, plain.Auth{User: "producer1", Pass: "producer-secret"}.AsMechanism())
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: []byte("ok")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Topic: "secret", Value: []byte("no")}).FirstErr(); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("produce to a denied topic: %v", err)
	}
	if _, err := kadm.NewClient(prod).CreateTopic(ctx, 1, 1, nil, "mine"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("a non-admin created a topic: %v", err)
	}
	if _, ok := n.core.Topic("mine"); ok {
		t.Fatal("topic created by a non-admin")
	}
	// The consumer lists only the topic it may read.
	cons := saslClient(t, n.addr, plain.Auth{User: "consumer1", Pass: "consumer-secret"}.AsMechanism())
	md, err := kadm.NewClient(cons).Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if names := md.Topics.Names(); len(names) != 1 || names[0] != "orders" {
		t.Fatalf("consumer1 sees topics %v, want [orders]", names)
	}
	g := saslClient(t, n.addr, plain.Auth{User: "consumer1", Pass: "consumer-secret"}.AsMechanism(),
		kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))
	got := pollValues(t, g, 1)
	if got[0] != "ok" {
		t.Fatalf("consumed %q", got)
	}
	if err := g.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit in its group: %v", err)
	}
	// Another group, or reading a topic it may not: refused.
	var os kadm.Offsets
	os.AddOffset("orders", 0, 1, -1)
	if _, err := kadm.NewClient(cons).CommitOffsets(ctx, "other", os); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Fatalf("commit in a denied group: %v", err)
	}
	c := saslClient(t, n.addr, plain.Auth{User: "consumer1", Pass: "consumer-secret"}.AsMechanism(),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"secret": {0: kgo.NewOffset().AtStart()}}))
	fs := c.PollFetches(ctx)
	denied := false
	fs.EachError(func(_ string, _ int32, err error) { denied = denied || errors.Is(err, kerr.TopicAuthorizationFailed) })
	if !denied {
		t.Fatalf("fetch of a denied topic: %v", fs.Errors())
	}
}

// TestSASLOtherClients: sarama (SaslHandshake v0 with raw tokens, and v1)
// and kafka-go (PLAIN and SCRAM-SHA-512) authenticate and produce.
func TestSASLOtherClients(t *testing.T) {
	n := startACLNode(t)
	ctx := ctx30(t)
	admin := saslClient(t, n.addr, plain.Auth{User: "admin01", Pass: "admin-secret"}.AsMechanism())
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "audit"); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int16{sarama.SASLHandshakeV0, sarama.SASLHandshakeV1} {
		cfg := saramaConfig()
		cfg.Net.SASL.Enable, cfg.Net.SASL.Version = true, v
		cfg.ApiVersionsRequest = v != sarama.SASLHandshakeV0 // sarama's rule for v0
		cfg.Net.SASL.User, cfg.Net.SASL.Password = "producer1", "producer-secret"
		cfg.Producer.Return.Successes, cfg.Producer.RequiredAcks = true, sarama.WaitForAll
		p, err := sarama.NewSyncProducer([]string{n.addr}, cfg)
		if err != nil {
			t.Fatalf("sarama handshake v%d: %v", v, err)
		}
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: "audit", Value: sarama.StringEncoder("s")}); err != nil {
			t.Fatalf("sarama handshake v%d send: %v", v, err)
		}
		p.Close()
	}
	m512, err := kgscram.Mechanism(kgscram.SHA512, "producer1", "producer-secret")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []kgsasl.Mechanism{kgplain.Mechanism{Username: "producer1", Password: "producer-secret"}, m512} {
		w := &kafkago.Writer{Addr: kafkago.TCP(n.addr), Topic: "audit", RequiredAcks: kafkago.RequireAll,
			Transport: &kafkago.Transport{SASL: m}}
		if err := w.WriteMessages(ctx, kafkago.Message{Value: []byte(m.Name())}); err != nil {
			t.Fatalf("kafka-go %s: %v", m.Name(), err)
		}
		w.Close()
	}
	if e := n.st.MaxOffset("audit", 0); e != 4 {
		t.Fatalf("%d batches stored, want 4", e)
	}
}

// FuzzAuthorized: every request the decoder accepts is answered under a
// restricted account without a panic, and the answer encodes; so are the
// SASL requests of a connection that has not authenticated.
func FuzzAuthorized(f *testing.F) {
	for key, rng := range apis {
		if key != 11 && key != 14 {
			f.Add(frameOf(kmsg.RequestForKey(key), rng.max, 1)[4:])
		}
	}
	n := startACLNode(f)
	acc := n.srv.cfg.ACL
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := decodeRequest(b)
		if err != nil || req.key == 11 || req.key == 14 {
			return
		}
		if fr, ok := req.body.(*kmsg.FetchRequest); ok {
			fr.MaxWaitMillis = 0
		}
		if resp := n.srv.authorized(principal{acc, "consumer1"}, req); resp != nil {
			appendResponse(nil, req.correlation, resp)
		}
		if resp, _ := n.srv.serveRequest(&connAuth{}, req, log); resp != nil {
			appendResponse(nil, req.correlation, resp)
		}
	})
}

// FuzzSASLTokens: any client tokens, for every mechanism, get an answer
// or an error, never a panic, and never authenticate without the secret.
func FuzzSASLTokens(f *testing.F) {
	f.Add("SCRAM-SHA-256", []byte("n,,n=producer1,r=abc"), []byte("c=biws,r=abc,p=AAAA"))
	f.Add("SCRAM-SHA-512", []byte("n,a=producer1,n=producer1,r=x"), []byte("c=bixhPXByb2R1Y2VyMSw=,r=x,p="))
	f.Add("PLAIN", []byte("\x00producer1\x00wrong"), []byte(nil))
	n := startACLNode(f)
	f.Fuzz(func(t *testing.T, mech string, first, final []byte) {
		a := &connAuth{mech: mech}
		if _, err := n.srv.saslStep(a, first); err != nil || a.user != "" {
			if a.user != "" && mech == "PLAIN" && string(first) != "\x00producer1\x00producer-secret" {
				t.Fatalf("PLAIN authenticated %q with %q", a.user, first)
			}
			return
		}
		if _, err := n.srv.saslStep(a, final); err == nil && a.user != "" {
			t.Fatalf("%s authenticated %q from random tokens %q %q", mech, a.user, first, final)
		}
	})
}

// Before SASL authentication a frame above maxUnauthenticatedRequestBytes
// closes the connection without being read; after it, the configured
// limit applies.
func TestUnauthenticatedFrameLimit(t *testing.T) {
	n := startACLNode(t)
	c, err := net.Dial("tcp", n.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(binary.BigEndian.AppendUint32(nil, maxUnauthenticatedRequestBytes+1))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a %d-byte frame before authentication: read %v, want EOF (connection closed)", maxUnauthenticatedRequestBytes+1, err)
	}
	ctx := ctx30(t)
	admin := saslClient(t, n.addr, plain.Auth{User: "admin01", Pass: "admin-secret"}.AsMechanism())
	if _, err := kadm.NewClient(admin).CreateTopic(ctx, 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	cl := saslClient(t, n.addr, plain.Auth{User: "producer1", Pass: "producer-secret"}.AsMechanism(), kgo.ProducerBatchCompression(kgo.NoCompression()))
	big := make([]byte, maxUnauthenticatedRequestBytes+1000)
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Value: big}).FirstErr(); err != nil {
		t.Fatalf("an authenticated produce of %d bytes: %v", len(big), err)
	}
}
