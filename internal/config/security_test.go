package config

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestSecurityKeys(t *testing.T) {
	conf := `aclEnable=true
aclFile=/etc/keel/plain_acl.yml
tls.server.mode=enforcing
tls.server.certPath=/etc/keel/server.pem
tls.server.keyPath=/etc/keel/server.key
tlsServerTrustCertPath=/etc/keel/ca.pem
tls.server.need.client.auth=require
`
	b, unknown, err := Parse([]byte(conf), "c")
	if err != nil || len(unknown) != 0 {
		t.Fatalf("Parse: %v %v", unknown, err)
	}
	if err := b.Validate(); err != nil {
		t.Fatal(err)
	}
	if !b.ACLEnable || b.ACLPath() != "/etc/keel/plain_acl.yml" || b.TLSMode != TLSEnforcing ||
		b.TLSServerCertPath != "/etc/keel/server.pem" || b.TLSServerKeyPath != "/etc/keel/server.key" ||
		b.TLSServerTrustCertPath != "/etc/keel/ca.pem" || b.TLSServerNeedClientAuth != TLSClientAuthRequire {
		t.Fatalf("parsed %+v", b)
	}
	d := Default()
	if d.ACLEnable || d.TLSMode != TLSDisabled || d.TLSServerNeedClientAuth != TLSClientAuthNone {
		t.Fatalf("defaults: acl %t tls %s auth %s", d.ACLEnable, d.TLSMode, d.TLSServerNeedClientAuth)
	}
	d.StorePathRootDir = "/data"
	if got := d.ACLPath(); got != filepath.Join("/data", "config", "plain_acl.yml") {
		t.Fatalf("default ACL path %s", got)
	}
}

func TestValidateSecurity(t *testing.T) {
	tests := []struct {
		conf string
		want []string
	}{
		{"tlsMode=enforcing", []string{"tlsServerCertPath", "tlsServerKeyPath"}},
		{"tlsMode=permissive\ntlsServerCertPath=c", []string{"tlsServerKeyPath"}},
		{"tlsServerNeedClientAuth=require", []string{"needs tlsMode permissive or enforcing", "tlsServerTrustCertPath"}},
		{"tlsMode=enforcing\ntlsServerCertPath=c\ntlsServerKeyPath=k\ntlsServerNeedClientAuth=optional", []string{"tlsServerTrustCertPath"}},
	}
	for _, tt := range tests {
		b, _, err := Parse([]byte(tt.conf), "c")
		if err != nil {
			t.Fatal(err)
		}
		err = b.Validate()
		for _, w := range tt.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: Validate = %v, want %q", tt.conf, err, w)
			}
		}
	}
	for _, bad := range []string{"tlsMode=on", "tlsServerNeedClientAuth=yes", "aclEnable=1"} {
		if _, _, err := Parse([]byte(bad), "c"); err == nil {
			t.Errorf("Parse(%q) succeeded", bad)
		}
	}
}

// TestPeersTLS: tlsEnable (tls.enable) and tlsClientTrustCertPath
// (tls.client.trustCertPath) parse under both names; the member dials
// its peers over TLS with tlsEnable or under tlsMode=enforcing, not under
// permissive alone.
func TestPeersTLS(t *testing.T) {
	tls := "tlsServerCertPath=c\ntlsServerKeyPath=k\n"
	for _, c := range []struct {
		conf string
		want bool
	}{
		{"", false},
		{"tlsMode=permissive\n" + tls, false},
		{"tlsMode=permissive\ntls.enable=true\n" + tls, true},
		{"tlsMode=enforcing\n" + tls, true},
		{"tlsEnable=true\n", true},
	} {
		b, unknown, err := Parse([]byte(c.conf+"tls.client.trustCertPath=/etc/keel/cluster-ca.pem\n"), "c")
		if err != nil || len(unknown) != 0 {
			t.Fatalf("%q: %v %v", c.conf, unknown, err)
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("%q: %v", c.conf, err)
		}
		if b.PeersTLS() != c.want || b.TLSClientTrustCertPath != "/etc/keel/cluster-ca.pem" {
			t.Errorf("%q: PeersTLS %t (want %t), trust %q", c.conf, b.PeersTLS(), c.want, b.TLSClientTrustCertPath)
		}
	}
	b, _, err := Parse([]byte("tlsClientTrustCertPath=/x\n"), "c")
	if err != nil || b.TLSClientTrustCertPath != "/x" || b.TLSEnable {
		t.Fatalf("tlsClientTrustCertPath: %+v %v", b.TLSClientTrustCertPath, err)
	}
}
