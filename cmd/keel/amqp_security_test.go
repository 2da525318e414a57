package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

var amqpsListenRE = regexp.MustCompile(`msg="amqps listening" addr=(\S+)`)

// TestAMQPSWithACLAccounts: keel serve with aclEnable=true and amqpsListen
// serves AMQP over TLS; an ACL account logs in with PLAIN (access key,
// secret key), guest does not, and a plain AMQP client on the TLS port
// gets no connection.
func TestAMQPSWithACLAccounts(t *testing.T) {
	dir, tmp := t.TempDir(), t.TempDir()
	certFile, keyFile := testCert(t, tmp)
	aclFile := filepath.Join(tmp, "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(securityACL), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\naclEnable=true\naclFile="+aclFile+
		"\ntlsServerCertPath="+certFile+"\ntlsServerKeyPath="+keyFile+"\namqpsListen=127.0.0.1:0\n")
	logs := &syncBuffer{}
	cmd := exec.Command(os.Args[0], "serve", "--data-dir", dir, "--namesrv-listen", "127.0.0.1:0",
		"--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--http-listen", "", "--kafka-listen", "", "-c", conf)
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var addr string
	waitFor(t, "the AMQPS listener", 30*time.Second, func() bool {
		if m := amqpsListenRE.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	tc := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}

	c, err := amqp091.DialTLS("amqps://admin001:admin-secret@"+addr+"/", tc)
	if err != nil {
		t.Fatalf("amqps with an ACL account: %v\n%s", err, logs.String())
	}
	ch, err := c.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare("secure", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	dc, err := ch.PublishWithDeferredConfirm("", "secure", false, false, amqp091.Publishing{Body: []byte("over tls"), DeliveryMode: 2})
	if err != nil || !dc.Wait() {
		t.Fatalf("publish over amqps: %v", err)
	}
	if d, ok, err := ch.Get("secure", true); err != nil || !ok || string(d.Body) != "over tls" {
		t.Fatalf("get over amqps: %v %v", ok, err)
	}
	c.Close()

	if c, err := amqp091.DialTLS("amqps://guest:guest@"+addr+"/", tc); err == nil {
		c.Close()
		t.Fatal("guest was let in with aclEnable=true")
	}
	if c, err := amqp091.DialConfig("amqp://admin001:admin-secret@"+addr+"/", amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)}); err == nil {
		c.Close()
		t.Fatal("a plain AMQP client was served on the TLS port")
	}
}
