package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestHAExposure: a replication listener reachable beyond this host that
// authenticates nobody stops the start, with an error naming the keys to
// set; loopback, a secret or mutual TLS let it start.
func TestHAExposure(t *testing.T) {
	public := &net.TCPAddr{IP: net.IPv4zero, Port: 10912}
	local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 10912}
	const tlsConf = "tlsMode=permissive\ntlsServerCertPath=/etc/keel/c.pem\ntlsServerKeyPath=/etc/keel/k.pem\n"
	cases := []struct {
		name  string
		addr  net.Addr
		conf  string
		allow bool
		say   string
	}{
		{"loopback, nothing set", local, "", true, ""},
		{"every interface, nothing set", public, "", false, "set haAuthSecret (or haAuthSecretFile) in broker.conf"},
		{"every interface, secret", public, "haAuthSecret=0123456789abcdef-group-a\n", true, ""},
		{"every interface, secret file", public, "haAuthSecretFile=/etc/keel/ha.secret\n", true, ""},
		{"every interface, mutual TLS", public, tlsConf + "haTLSTrustCertPath=/etc/keel/ca.pem\n", true, ""},
		{"every interface, TLS alone", public, tlsConf, false, "TLS without haTLSTrustCertPath encrypts, but lets anyone connect"},
	}
	for _, c := range cases {
		cfg, _, _, _, err := loadWith(t, "-c", writeConf(t, c.conf))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err = checkHAExposure(cfg, boundListeners{listenHA: fakeListener{addr: c.addr}}, c.addr.String())
		if (err == nil) != c.allow {
			t.Errorf("%s: err = %v, want allowed=%v", c.name, err, c.allow)
		}
		if err != nil && (!strings.Contains(err.Error(), c.say) || !strings.Contains(err.Error(), "--ha-listen 127.0.0.1:10912")) {
			t.Errorf("%s: error does not say what to do: %v", c.name, err)
		}
	}
}

var (
	slaveFollowingRE = regexp.MustCompile(`msg="replication: following master"`)
	replicaAuthRE    = regexp.MustCompile(`msg="replication listening" .*auth="haAuthSecret \(challenge-response\)"`)
)

// startSecuredMaster starts a NameServer and an ASYNC_MASTER with conf
// (added to the group's common keys) on loopback, and returns the
// NameServer's address, the master and its HA address.
func startSecuredMaster(t *testing.T, common, conf string) (string, *keelRun, string) {
	t.Helper()
	ns := startRun(t, "namesrv", "--namesrv-listen", "127.0.0.1:0")
	nsAddr := ns.await(t, "the NameServer to listen", listenRE)
	mconf := writeConf(t, common+conf+"brokerRole=ASYNC_MASTER\nbrokerId=0\n")
	m := startRun(t, "broker", "-n", nsAddr, "-c", mconf, "--data-dir", filepath.Join(t.TempDir(), "master"),
		"--broker-listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--http-listen", "", "--amqp-listen", "", "--kafka-listen", "")
	return nsAddr, m, m.await(t, "the master's HA listener", haListenRE)
}

// startSecuredSlave starts slave id of the master at ha with conf.
func startSecuredSlave(t *testing.T, nsAddr, ha, common, conf string, id int) *keelRun {
	t.Helper()
	sconf := writeConf(t, common+conf+"brokerRole=SLAVE\nbrokerId="+string(rune('0'+id))+"\nhaMasterAddress="+ha+"\n")
	return startRun(t, "broker", "-n", nsAddr, "-c", sconf, "--data-dir", filepath.Join(t.TempDir(), "slave"),
		"--broker-listen", "127.0.0.1:0", "--http-listen", "", "--amqp-listen", "", "--kafka-listen", "")
}

// TestReplicationSecretGroup: a master and its slave sharing haAuthSecret
// (the master's from haAuthSecretFile) replicate; a slave with another
// secret is refused, and both it and the master say so in their logs.
func TestReplicationSecretGroup(t *testing.T) {
	const common = "brokerClusterName=c\nbrokerName=broker-a\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n"
	secretFile := filepath.Join(t.TempDir(), "ha.secret")
	if err := os.WriteFile(secretFile, []byte("group-a-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	nsAddr, m, ha := startSecuredMaster(t, common, "haAuthSecretFile="+secretFile+"\n")
	if !replicaAuthRE.MatchString(m.logs.String()) {
		t.Fatalf("the master's listening line does not say it requires the secret:\n%s", m.logs.String())
	}
	good := startSecuredSlave(t, nsAddr, ha, common, "haAuthSecret=group-a-secret-0123456789\n", 1)
	bad := startSecuredSlave(t, nsAddr, ha, common, "haAuthSecret=another-secret-0123456789\n", 2)
	good.await(t, "the slave to follow", regexp.MustCompile(`(msg="replication: following master")`))
	waitFor(t, "the refusals on both sides", 30*time.Second, func() bool {
		return strings.Contains(bad.logs.String(), "authentication failed") &&
			strings.Contains(m.logs.String(), "did not authenticate")
	})
	if slaveFollowingRE.MatchString(bad.logs.String()) {
		t.Fatalf("the slave with the wrong secret follows:\n%s", bad.logs.String())
	}
	if s := m.logs.String(); strings.Contains(s, `"replica connected" component=replication replica=2`) || strings.Contains(s, "group-a-secret") {
		t.Fatalf("master log:\n%s", s)
	}
}

// TestReplicationTLSGroup: with tlsMode on and haTLSTrustCertPath, the
// link is mutual TLS: a slave with the group's certificate follows; a
// slave without TLS is refused by the master's TLS listener, which logs
// it.
func TestReplicationTLSGroup(t *testing.T) {
	const common = "brokerClusterName=c\nbrokerName=broker-a\nflushDiskType=SYNC_FLUSH\nmapedFileSizeCommitLog=16777216\n"
	cert, key := testCert(t, t.TempDir())
	tlsConf := "tlsMode=permissive\ntlsServerCertPath=" + cert + "\ntlsServerKeyPath=" + key + "\nhaTLSTrustCertPath=" + cert + "\n"
	nsAddr, m, ha := startSecuredMaster(t, common, tlsConf)
	if !strings.Contains(m.logs.String(), `tls="mutual (certificates checked against haTLSTrustCertPath)" auth="mutual TLS"`) {
		t.Fatalf("the master's listening line does not say it requires mutual TLS:\n%s", m.logs.String())
	}
	good := startSecuredSlave(t, nsAddr, ha, common, tlsConf, 1)
	good.await(t, "the TLS slave to follow", regexp.MustCompile(`(msg="replication: following master")`))
	plain := startSecuredSlave(t, nsAddr, ha, common, "", 2)
	waitFor(t, "the master's refusal of the plain slave", 30*time.Second, func() bool {
		return strings.Contains(m.logs.String(), "TLS handshake failed")
	})
	waitFor(t, "the plain slave's failure", 30*time.Second, func() bool {
		return strings.Contains(plain.logs.String(), "link to master lost")
	})
	if slaveFollowingRE.MatchString(plain.logs.String()) {
		t.Fatalf("the plain slave follows a TLS master:\n%s", plain.logs.String())
	}
}

// TestHASecretFile: haAuthSecretFile is read without its final line
// break; a short or missing file stops the start with an error naming it,
// never quoting the secret.
func TestHASecretFile(t *testing.T) {
	dir := t.TempDir()
	good, short := filepath.Join(dir, "good"), filepath.Join(dir, "short")
	os.WriteFile(good, []byte("0123456789abcdef-xyz\r\n"), 0o600)
	os.WriteFile(short, []byte("tiny-secret\n"), 0o600)
	s, err := readHASecretFile(good, discard)
	if err != nil || string(s) != "0123456789abcdef-xyz" {
		t.Fatalf("read %q, %v", s, err)
	}
	if _, err := readHASecretFile(short, discard); err == nil || !strings.Contains(err.Error(), short) || strings.Contains(err.Error(), "tiny-secret") {
		t.Fatalf("short secret: %v", err)
	}
	if _, err := readHASecretFile(filepath.Join(dir, "missing"), discard); err == nil || !strings.Contains(err.Error(), "haAuthSecretFile") {
		t.Fatalf("missing file: %v", err)
	}
}

// TestHAListenDefaultsToLoopbackUnprotected: a master with neither a
// secret nor mutual TLS whose replication address is derived from a
// broker listener on every interface listens on loopback only (it starts,
// and nobody beyond the host receives the log); with a secret it listens
// where the broker does; an explicit --ha-listen is kept as given (and
// refused beyond loopback by checkHAExposure).
func TestHAListenDefaultsToLoopbackUnprotected(t *testing.T) {
	for _, c := range []struct {
		name, conf, flag, broker string
		want                     string
		loopbackOnly             bool
	}{
		{"every interface, nothing set", "", "", ":10911", "127.0.0.1:10912", true},
		{"a host address, nothing set", "", "", "192.0.2.7:10911", "127.0.0.1:10912", true},
		{"loopback broker", "", "", "127.0.0.1:10911", "127.0.0.1:10912", false},
		{"every interface, secret", "haAuthSecret=0123456789abcdef-group-a\n", "", ":10911", ":10912", false},
		{"explicit flag", "", "0.0.0.0:20000", ":10911", "0.0.0.0:20000", false},
	} {
		cfg, _, _, _, err := loadWith(t, "-c", writeConf(t, c.conf))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got, lo, err := haListenAddr(cfg, c.flag, c.broker)
		if err != nil || got != c.want || lo != c.loopbackOnly {
			t.Errorf("%s: %q loopbackOnly=%v (%v), want %q %v", c.name, got, lo, err, c.want, c.loopbackOnly)
		}
	}
}
