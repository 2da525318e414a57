package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAdminWithACLAndTLS runs the admin commands against a keel serve with
// aclEnable=true and tlsMode=enforcing: without TLS or without credentials
// they fail clearly; with --tls-insecure and an admin account they work.
func TestAdminWithACLAndTLS(t *testing.T) {
	tmp := t.TempDir()
	cert, key := testCert(t, tmp)
	aclFile := filepath.Join(tmp, "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(securityACL), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\naclEnable=true\naclFile="+aclFile+
		"\ntlsMode=enforcing\ntlsServerCertPath="+cert+"\ntlsServerKeyPath="+key+"\n")
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-c", conf, "--data-dir", filepath.Join(tmp, "data"), "--namesrv-listen", "127.0.0.1:0",
			"--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", ""}, &bytes.Buffer{}, logs)
	}()
	defer func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not stop")
		}
	}()
	ns := namesrvAddrFromLogs(t, logs)
	keel := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append(args, "-n", ns, "--timeout", "5s"), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	creds := []string{"--tls-insecure", "--access-key", "admin001", "--secret-key", "admin-secret"}
	waitFor(t, "the broker to register", 30*time.Second, func() bool {
		code, _, _ := keel(append([]string{"topic", "list"}, creds...)...)
		return code == exitOK
	})

	if code, _, errOut := keel("topic", "list"); code != exitError {
		t.Errorf("plain connection to a TLS-only cluster: exit %d %s", code, errOut)
	}
	code, _, errOut := keel("topic", "create", "Secured", "--tls-insecure")
	if code != exitError || !strings.Contains(errOut, "NO_PERMISSION") {
		t.Errorf("unsigned create: exit %d %q", code, errOut)
	}
	if code, _, errOut := keel("topic", "list", "--access-key", "admin001"); code != exitUsage {
		t.Errorf("access key without secret: exit %d %q", code, errOut)
	}
	if code, out, errOut := keel(append([]string{"topic", "create", "Secured", "--queues", "1"}, creds...)...); code != exitOK {
		t.Fatalf("signed create: exit %d %s %s", code, out, errOut)
	}
	// txn list goes through the same client: plain, unsigned and signed.
	if code, _, errOut := keel("txn", "list"); code != exitError {
		t.Errorf("txn list over a plain connection to a TLS-only cluster: exit %d %s", code, errOut)
	}
	if code, out, errOut := keel("txn", "list", "--tls-insecure"); code != exitError || !strings.Contains(out+errOut, "NO_PERMISSION") {
		t.Errorf("unsigned txn list: exit %d %q %q", code, out, errOut)
	}
	if code, out, errOut := keel(append([]string{"txn", "list", "--topic", "Secured"}, creds...)...); code != exitOK ||
		!strings.Contains(out, "TRANSACTION_ID") {
		t.Errorf("signed txn list: exit %d %q %q", code, out, errOut)
	}
	t.Setenv(envAccessKey, "admin001")
	t.Setenv(envSecretKey, "admin-secret")
	// The environment supplies the credentials to commands built from now on.
	var out, errOut2 bytes.Buffer
	code = run(context.Background(), []string{"msg", "send", "--topic", "Secured", "--body", "s", "--tls-insecure", "-n", ns}, &out, &errOut2)
	if code != exitOK || !strings.Contains(out.String(), "SEND_OK") {
		t.Errorf("send with credentials from the environment: exit %d %s %s\n%s", code, out.String(), errOut2.String(), logs.String())
	}
}
