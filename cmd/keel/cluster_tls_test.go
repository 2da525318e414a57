package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/keelmq/keel/internal/namesrv"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/tlsconf"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// memberCert writes a self-signed certificate for 127.0.0.1, for server
// and client authentication (it is its own CA: a member presents it on
// every listener and as a client, and trusts it), and its key.
func memberCert(t *testing.T, dir, name string) (string, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, keyFile := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	for path, b := range map[string]*pem.Block{cert: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, keyFile
}

// tlsGroups is a NameServer (plain TCP, as keel namesrv serves) and two
// broker groups' masters as child processes, every listener TLS only:
// tlsMode=enforcing with client certificates required, and the AMQP door
// on amqpsListen alone (no plain AMQP port).
type tlsGroups struct {
	ns          string
	kafka, amqp [2]string // broker-a's, broker-b's Kafka and amqps doors
	mgmt        [2]string // their AMQP management listeners (plain HTTP)
	http        [2]string // their HTTP listeners (the console)
	logs        [2]*syncBuffer
	client      *tls.Config // the clients' TLS: the members' certificate, trusting it
}

// startTLSGroups starts the groups; trust[i] is group i's
// tlsClientTrustCertPath ("": the members' certificate).
func startTLSGroups(t *testing.T, trust [2]string) *tlsGroups {
	t.Helper()
	dir := t.TempDir()
	cert, key := memberCert(t, dir, "member")
	g := &tlsGroups{}
	var err error
	if g.client, err = tlsconf.MemberClient(tlsconf.MemberConfig{CertFile: cert, KeyFile: key, TrustCertFile: cert}); err != nil {
		t.Fatal(err)
	}
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	g.ns = ns.await(t, "the NameServer to listen", listenRE)
	for i, name := range []string{"broker-a", "broker-b"} {
		if trust[i] == "" {
			trust[i] = cert
		}
		conf := "brokerClusterName=c\nbrokerName=" + name + "\nbrokerId=0\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n" +
			"autoCreateTopicEnable=false\nkafkaGroupInitialRebalanceDelayMs=0\nkafkaNodeId=" + strconv.Itoa(i+1) + "\n" +
			"tlsMode=enforcing\ntlsServerCertPath=" + cert + "\ntlsServerKeyPath=" + key + "\n" +
			"tlsServerTrustCertPath=" + cert + "\ntlsServerNeedClientAuth=require\n" +
			"tlsClientTrustCertPath=" + trust[i] + "\namqpsListen=127.0.0.1:0\namqpManagementListen=127.0.0.1:0\n"
		_, logs := startBrokerProc(t, "-n", g.ns, "-c", writeConf(t, conf), "--data-dir", filepath.Join(dir, name),
			"--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
			"--amqp-listen", "", "--kafka-listen", "127.0.0.1:0")
		g.logs[i] = logs
		g.http[i] = awaitLog(t, name+"'s HTTP listener", logs, httpListenRE)
		g.kafka[i] = awaitLog(t, name+"'s Kafka listener", logs, kafkaListenRE)
		g.amqp[i] = awaitLog(t, name+"'s amqps listener", logs, amqpsListenRE)
		g.mgmt[i] = awaitLog(t, name+"'s management listener", logs, amqpMgmtListenRE)
	}
	c, err := remoting.Dial(context.Background(), g.ns, remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitFor(t, "both amqps doors and both Kafka doors registered", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ac, err := namesrv.GetAMQPCluster(ctx, c, "c")
		if err != nil || len(ac.Members) != 2 || ac.Members[0].AMQPSAddr != g.amqp[0] || ac.Members[1].AMQPSAddr != g.amqp[1] ||
			ac.Members[0].AMQPAddr != "" {
			return false
		}
		kc, err := namesrv.GetKafkaCluster(ctx, c, "c")
		return err == nil && len(kc.Brokers) == 2
	})
	return g
}

func (g *tlsGroups) dialAMQP(t *testing.T, i int) *amqp091.Connection {
	t.Helper()
	conn, err := amqp091.DialTLS("amqps://guest:guest@"+g.amqp[i]+"/", g.client)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestClusterTLS: two broker groups whose every listener is TLS only
// (tlsMode=enforcing, client certificates required, amqpsListen without
// a plain AMQP port). Each master registers its amqps door and the other
// forwards to it over TLS; the Kafka door's forwards go over TLS too:
// kadm's CreateTopics through broker-a spreads the topic over both
// groups, a franz-go group consumer reads every record of both groups'
// partitions and commits, and kadm reads every offset back; amqp091-go
// publishes with confirms through broker-a to a queue broker-b stores,
// every message confirmed, and consumes them all through broker-a; the
// management API of broker-a lists qb with its node, read from broker-b
// over TLS, and so does broker-a's console (its AMQP page asks every
// master over TLS).
func TestClusterTLS(t *testing.T) {
	g := startTLSGroups(t, [2]string{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(g.kafka[0], g.kafka[1]), kgo.DialTLSConfig(g.client),
		kgo.RequiredAcks(kgo.AllISRAcks()), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	waitFor(t, "both masters in the Kafka cluster", 30*time.Second, func() bool {
		md, err := brokerMetadata(ctx, cl)
		return err == nil && len(md.Brokers) == 2
	})
	if r, err := adm.CreateTopic(ctx, 4, -1, nil, "orders"); err != nil || r.Err != nil || r.NumPartitions != 4 {
		t.Fatalf("create orders: %+v %v", r, err)
	}
	waitFor(t, "Metadata to show partitions 0-1 on broker-a, 2-3 on broker-b", 30*time.Second, func() bool {
		md, err := adm.Metadata(ctx, "orders")
		if err != nil || len(md.Topics["orders"].Partitions) != 4 {
			return false
		}
		for p, pd := range md.Topics["orders"].Partitions {
			if pd.Err != nil || pd.Leader != int32(1+p/2) {
				return false
			}
		}
		return true
	})
	acked := map[int32][]string{}
	for p := int32(0); p < 4; p++ {
		for i := range 3 {
			v := fmt.Sprintf("r-%d-%d", p, i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Partition: p, Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce to %d: %v", p, err)
			}
			acked[p] = append(acked[p], v)
		}
	}
	const group = "billing"
	cc, err := kgo.NewClient(kgo.SeedBrokers(g.kafka[0]), kgo.DialTLSConfig(g.client), kgo.ConsumerGroup(group),
		kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	got := map[int32][]string{}
	for n := 0; n < 12; {
		fs := cc.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of 12: %v", n, ctx.Err())
		}
		fs.EachError(func(_ string, p int32, err error) { t.Fatalf("fetch %d: %v", p, err) })
		fs.EachRecord(func(r *kgo.Record) { got[r.Partition] = append(got[r.Partition], string(r.Value)); n++ })
	}
	for p := int32(0); p < 4; p++ {
		if !slices.Equal(got[p], acked[p]) {
			t.Errorf("partition %d read %v, want %v", p, got[p], acked[p])
		}
	}
	if err := cc.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatalf("commit: %v", err)
	}
	cc.Close()
	offs, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	for p := int32(0); p < 4; p++ {
		if o, ok := offs.Lookup("orders", p); !ok || o.Err != nil || o.At != 3 {
			t.Errorf("partition %d's committed offset: %+v %v, want 3", p, o, ok)
		}
	}

	// AMQP: broker-b stores qb; broker-a's door forwards to broker-b's
	// amqps door.
	chb, err := g.dialAMQP(t, 1).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chb.QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	cha, err := g.dialAMQP(t, 0).Channel()
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	if acked, nacked := publishConfirmed(t, cha, "qb", "m", n, true); acked != n || nacked != 0 {
		t.Fatalf("publish through broker-a to broker-b's queue: %d acks, %d nacks of %d", acked, nacked, n)
	}
	if q, err := chb.QueueDeclarePassive("qb", true, false, false, false, nil); err != nil || q.Messages != n {
		t.Fatalf("broker-b counts %d messages in qb (%v), want %d", q.Messages, err, n)
	}
	if code, body := mgmtGet(t, g.mgmt[0], "/api/queues/%2F/qb", "guest", "guest"); code != 200 ||
		!strings.Contains(string(body), `"node":"keel@broker-b"`) || !strings.Contains(string(body), `"messages":50,`) {
		t.Fatalf("broker-a's management API on qb: %d %s", code, body)
	}
	resp, err := http.Get("http://" + g.http[0] + "/api/amqp")
	if err != nil {
		t.Fatal(err)
	}
	var bs []admin.BrokerAMQP
	err = json.NewDecoder(resp.Body).Decode(&bs)
	resp.Body.Close()
	if err != nil || len(bs) != 2 || bs[1].Broker != "broker-b" || bs[1].Err != "" || len(bs[1].Queues) != 1 || bs[1].Queues[0].Name != "qb" ||
		bs[0].Err != "" {
		t.Fatalf("broker-a's console AMQP page: %+v %v", bs, err)
	}
	ds, err := cha.Consume("qb", "", false, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, d := range drain(t, ds, n) {
		if seen[string(d.Body)] {
			t.Fatalf("%s delivered twice", d.Body)
		}
		seen[string(d.Body)] = true
		if err := d.Ack(false); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "broker-b to count qb's messages acknowledged", 30*time.Second, func() bool {
		q, err := chb.QueueDeclarePassive("qb", true, false, false, false, nil)
		return err == nil && q.Messages == 0
	})
}

// TestClusterTLSWrongCA: as TestClusterTLS, but broker-a trusts another
// CA (tlsClientTrustCertPath) than the one that signed broker-b's
// certificate. Its forwards fail at the handshake, promptly and clearly:
// kadm's CreateTopics through broker-a (the controller) gets an error,
// publishes with confirms through broker-a to broker-b's queue are all
// nacked, a passive declare through broker-a of broker-b's queue 404 naming the
// refused certificate, broker-a's log names the cause for both, and its
// management API shows broker-b as a node that did not answer, with why.
func TestClusterTLSWrongCA(t *testing.T) {
	other, _ := memberCert(t, t.TempDir(), "other")
	g := startTLSGroups(t, [2]string{other, ""})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(g.kafka[0]), kgo.DialTLSConfig(g.client), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	waitFor(t, "both masters in the Kafka cluster", 30*time.Second, func() bool {
		md, err := brokerMetadata(ctx, cl)
		return err == nil && len(md.Brokers) == 2 && md.ControllerID == 1
	})
	start := time.Now()
	r, err := adm.CreateTopic(ctx, 4, -1, nil, "orders")
	if err == nil && r.Err == nil {
		t.Fatalf("CreateTopics spread to a group whose certificate broker-a does not trust: %+v", r)
	}
	t.Logf("CreateTopics through broker-a: %v %v (after %v)", err, r.Err, time.Since(start))
	waitFor(t, "broker-a's log to name the refused certificate of the Kafka forward", 10*time.Second, func() bool {
		return strings.Contains(g.logs[0].String(), "not signed by a trusted CA")
	})

	chb, err := g.dialAMQP(t, 1).Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chb.QueueDeclare("qb", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	conna := g.dialAMQP(t, 0)
	cha, err := conna.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if acked, nacked := publishConfirmed(t, cha, "qb", "m", 5, false); acked != 0 || nacked != 5 {
		t.Fatalf("publish through broker-a to broker-b's queue: %d acks, %d nacks of 5, want every one nacked", acked, nacked)
	}
	_, err = cha.QueueDeclarePassive("qb", true, false, false, false, nil)
	var ae *amqp091.Error
	if !errors.As(err, &ae) || ae.Code != amqp091.NotFound || !strings.Contains(ae.Reason, "not signed by a trusted CA") {
		t.Fatalf("passive declare through broker-a of broker-b's queue: %v, want 404 naming the certificate", err)
	}
	waitFor(t, "broker-a's log to name the refused door", 10*time.Second, func() bool {
		return strings.Contains(g.logs[0].String(), "cannot reach another broker group's door")
	})
	code, body := mgmtGet(t, g.mgmt[0], "/api/nodes/keel@broker-b", "guest", "guest")
	if code != 200 || !strings.Contains(string(body), `"running":false`) || !strings.Contains(string(body), "not signed by a trusted CA") {
		t.Fatalf("broker-a's management API on broker-b: %d %s", code, body)
	}
}
