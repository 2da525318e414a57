package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io/fs"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/acl"
	"github.com/keelmq/keel/internal/remoting"
	"github.com/keelmq/keel/internal/tlsconf"
)

const securityACL = `accounts:
  - accessKey: admin001
    secretKey: admin-secret
    admin: true
`

var brokerListenRE = regexp.MustCompile(`msg="broker listening" addr=(\S+)`)

// testCert writes a self-signed certificate for 127.0.0.1 and its key.
func testCert(t *testing.T, dir string) (string, string) {
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
	cert, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for path, b := range map[string]*pem.Block{cert: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cert, keyFile
}

func signedReq(code int16, ext map[string]string, body []byte) *remoting.Command {
	ext[acl.KeyAccessKey] = "admin001"
	ext[acl.KeySignature] = acl.Sign("admin-secret", ext, body)
	return remoting.NewRequest(code, ext, body)
}

func invokeBroker(t *testing.T, addr string, tc *tls.Config, req *remoting.Command) *remoting.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, remoting.ClientConfig{TLS: tc})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		t.Fatalf("invoke %d: %v", req.Code, err)
	}
	return resp
}

// TestServeSecurity runs keel serve (a child process, under the umask the
// test runs with) with aclEnable=true and tlsMode=enforcing: unsigned and
// plain requests are refused, a signed TLS client creates a topic and sends
// a message. After a clean shutdown every file and directory it created in
// the data directory is readable only by its user.
func TestServeSecurity(t *testing.T) {
	tmp := t.TempDir()
	data := filepath.Join(tmp, "data") // created by keel
	cert, key := testCert(t, tmp)
	aclFile := filepath.Join(tmp, "plain_acl.yml")
	if err := os.WriteFile(aclFile, []byte(securityACL), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := writeConf(t, "mapedFileSizeCommitLog=16777216\naclEnable=true\naclFile="+aclFile+
		"\ntlsMode=enforcing\ntlsServerCertPath="+cert+"\ntlsServerKeyPath="+key+"\n")
	var logs syncBuffer
	cmd := exec.Command(os.Args[0], "serve", "-c", conf, "--data-dir", data,
		"--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "KEEL_TEST_MAIN=1")
	cmd.Stderr = &logs
	// Start the child with the usual umask 022 (in-process serve tests may
	// have set this process's to 077): keel itself must restrict the modes.
	old := syscall.Umask(0o022)
	err := cmd.Start()
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	nsAddr := namesrvAddrFromLogs(t, &logs)
	waitFor(t, "the broker to register", 30*time.Second, func() bool {
		return brokerRegisteredTLS(t, nsAddr, "broker-a", &tls.Config{InsecureSkipVerify: true})
	})
	m := brokerListenRE.FindStringSubmatch(logs.String())
	if m == nil {
		t.Fatalf("no broker address in the log:\n%s", logs.String())
	}
	brAddr := strings.Replace(m[1], "[::]", "127.0.0.1", 1)
	tc := &tls.Config{InsecureSkipVerify: true}

	if resp := invokeBroker(t, brAddr, nil, remoting.NewRequest(remoting.ReqGetBrokerRuntimeInfo, nil, nil)); resp.Code != remoting.ResSystemError ||
		resp.Remark != tlsconf.PlainRefusedRemark {
		t.Fatalf("plain client: %d %q", resp.Code, resp.Remark)
	}
	if resp := invokeBroker(t, brAddr, tc, remoting.NewRequest(remoting.ReqGetBrokerRuntimeInfo, nil, nil)); resp.Code != remoting.ResNoPermission {
		t.Fatalf("unsigned TLS client: %d %q", resp.Code, resp.Remark)
	}
	create := signedReq(remoting.ReqUpdateAndCreateTopic, map[string]string{
		"topic": "Secured", "readQueueNums": "1", "writeQueueNums": "1", "perm": "6"}, nil)
	if resp := invokeBroker(t, brAddr, tc, create); resp.Code != remoting.ResSuccess {
		t.Fatalf("create topic: %d %q", resp.Code, resp.Remark)
	}
	send := signedReq(remoting.ReqSendMessage, map[string]string{
		"producerGroup": "pg", "topic": "Secured", "queueId": "0", "sysFlag": "0", "flag": "0",
		"bornTimestamp": "1700000000000", "properties": "KEYS\x01k1\x02", "reconsumeTimes": "0",
		"defaultTopic": "TBW102", "defaultTopicQueueNums": "4"}, []byte("secret payload"))
	if resp := invokeBroker(t, brAddr, tc, send); resp.Code != remoting.ResSuccess {
		t.Fatalf("send: %d %q", resp.Code, resp.Remark)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("keel serve: %v\n%s", err, logs.String())
		}
	case <-time.After(shutdownTimeout + 5*time.Second):
		t.Fatalf("keel serve did not exit:\n%s", logs.String())
	}
	checkOwnerOnly(t, data)
}

// checkOwnerOnly fails for every file or directory under root that group
// or others may read, write or search.
func checkOwnerOnly(t *testing.T, root string) {
	t.Helper()
	var files int
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: mode %v, want no access for group and others", path, info.Mode().Perm())
		}
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 5 {
		t.Fatalf("only %d entries under %s: the store did not write its files", files, root)
	}
}

// TestServeSecurityConfigErrors: with aclEnable=true a missing or invalid
// ACL file, and with TLS on an unreadable certificate, stop serve at start
// with an error naming the file.
func TestServeSecurityConfigErrors(t *testing.T) {
	tmp := t.TempDir()
	bad := filepath.Join(tmp, "bad_acl.yml")
	if err := os.WriteFile(bad, []byte("accounts:\n  - accessKey: short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct{ conf, want string }{
		"missing ACL file": {"aclEnable=true\naclFile=" + filepath.Join(tmp, "none.yml") + "\n", "none.yml: no such file"},
		"invalid ACL file": {"aclEnable=true\naclFile=" + bad + "\n", "bad_acl.yml:2: accessKey must be at least 7 characters"},
		"missing cert": {"tlsMode=enforcing\ntlsServerCertPath=" + filepath.Join(tmp, "c.pem") + "\ntlsServerKeyPath=" +
			filepath.Join(tmp, "k.pem") + "\n", "c.pem"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			var logs syncBuffer
			code := run(context.Background(), []string{"serve", "-c", writeConf(t, c.conf), "--data-dir", t.TempDir(),
				"--namesrv-listen", "127.0.0.1:0", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "127.0.0.1:0"}, &bytes.Buffer{}, &logs)
			if code != exitError || !strings.Contains(logs.String(), c.want) {
				t.Fatalf("exit %d, want %d and %q in:\n%s", code, exitError, c.want, logs.String())
			}
		})
	}
}
