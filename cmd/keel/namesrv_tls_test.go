package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/tlsconf"
)

// brokerRegisteredTLS is brokerRegistered over a TLS connection (tc) or,
// with tc nil, plain TCP that must not be refused.
func brokerRegisteredTLS(t *testing.T, addr, brokerName string, tc *tls.Config) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{TLS: tc})
	if err != nil {
		return false
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqGetBrokerClusterInfo, nil, nil))
	return err == nil && resp.Code == 0 && bytes.Contains(resp.Body, []byte(brokerName))
}

// namesrvInvoke sends GET_BROKER_CLUSTER_INFO to the NameServer at addr.
func namesrvInvoke(t *testing.T, addr string, tc *tls.Config) *remoting.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{TLS: tc})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, remoting.NewRequest(remoting.ReqGetBrokerClusterInfo, nil, nil))
	if err != nil {
		t.Fatalf("cluster info from %s: %v", addr, err)
	}
	return resp
}

// serveConf runs `keel serve` in-process with conf until the test ends and
// returns its log and the NameServer address.
func serveConf(t *testing.T, conf string) (*syncBuffer, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan int, 1)
	tempDir := t.TempDir() // made before the run starts, so removed only after it stopped
	go func() {
		done <- run(ctx, []string{"serve", "-c", writeConf(t, conf), "--data-dir", tempDir, "--namesrv-listen", "127.0.0.1:0",
			"--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", ""}, &bytes.Buffer{}, logs)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(shutdownTimeout + 5*time.Second):
			t.Errorf("serve did not stop:\n%s", logs.String())
		}
	})
	return logs, namesrvAddrFromLogs(t, logs)
}

// TestServeEnforcingNamesrv: with tlsMode=enforcing the embedded NameServer
// is TLS-only too, and the broker registers with it over TLS.
func TestServeEnforcingNamesrv(t *testing.T) {
	tmp := t.TempDir()
	cert, key := testCert(t, tmp)
	logs, ns := serveConf(t, "mapedFileSizeCommitLog=16777216\ntlsMode=enforcing\ntlsServerCertPath="+cert+"\ntlsServerKeyPath="+key+"\n")
	tc := &tls.Config{InsecureSkipVerify: true}
	waitFor(t, "the broker to register over TLS", 30*time.Second, func() bool { return brokerRegisteredTLS(t, ns, "broker-a", tc) })
	if resp := namesrvInvoke(t, ns, nil); resp.Code != remoting.ResSystemError || resp.Remark != tlsconf.PlainRefusedRemark {
		t.Fatalf("plain client at the NameServer: %d %q, want the TLS-only refusal", resp.Code, resp.Remark)
	}
	if !strings.Contains(logs.String(), "tls=enforcing broker_registers_over_tls=true") {
		t.Fatalf("NameServer log line:\n%s", logs.String())
	}
}

// TestServeNamesrvClientAuthFallback: when client certificates are required
// and the server certificate cannot authenticate as a client, the broker
// cannot register over TLS: the NameServer is served permissive (with a
// warning) and the broker registers over plain TCP.
func TestServeNamesrvClientAuthFallback(t *testing.T) {
	tmp := t.TempDir()
	cert, key := testCert(t, tmp) // server authentication only
	ca := filepath.Join(tmp, "ca.pem")
	pem, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	logs, ns := serveConf(t, "mapedFileSizeCommitLog=16777216\ntlsMode=enforcing\ntlsServerCertPath="+cert+"\ntlsServerKeyPath="+key+
		"\ntlsServerTrustCertPath="+ca+"\ntlsServerNeedClientAuth=require\n")
	waitFor(t, "the broker to register over plain TCP", 30*time.Second, func() bool { return brokerRegisteredTLS(t, ns, "broker-a", nil) })
	out := logs.String()
	if !strings.Contains(out, "NameServer served permissive, not enforcing") || !strings.Contains(out, "tls=permissive broker_registers_over_tls=false") {
		t.Fatalf("no fallback warning or wrong mode:\n%s", out)
	}
}
