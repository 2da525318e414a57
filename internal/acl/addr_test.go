package acl

import (
	"net"
	"net/netip"
	"strings"
	"testing"
)

func TestAddrPatterns(t *testing.T) {
	cases := []struct {
		pattern string
		yes, no []string
	}{
		{"", nil, []string{"127.0.0.1", "::1"}},
		{"*", []string{"1.2.3.4", "::1"}, nil},
		{"*.*.*.*", []string{"1.2.3.4"}, nil},
		{"192.168.0.1", []string{"192.168.0.1"}, []string{"192.168.0.2", "::1"}},
		{"::1", []string{"::1"}, []string{"127.0.0.1"}},
		{"192.168.0.{1,2}", []string{"192.168.0.1", "192.168.0.2"}, []string{"192.168.0.3", "192.168.1.1"}},
		{"2001:db8::{1,2}", []string{"2001:db8::1", "2001:db8::2"}, []string{"2001:db8::3"}},
		{"10.0.0.1, 10.0.0.9", []string{"10.0.0.1", "10.0.0.9"}, []string{"10.0.0.2"}},
		{"192.168.1.*", []string{"192.168.1.0", "192.168.1.255"}, []string{"192.168.2.1", "::1"}},
		{"192.168.*", []string{"192.168.0.1", "192.168.255.7"}, []string{"192.169.0.1"}},
		{"192.168.*.*", []string{"192.168.3.4"}, []string{"10.168.3.4"}},
		{"10.*", []string{"10.1.2.3"}, []string{"11.1.2.3"}},
		{"192.168.1.1-100", []string{"192.168.1.1", "192.168.1.50", "192.168.1.100"}, []string{"192.168.1.0", "192.168.1.101", "192.168.2.50"}},
		{"192.168.10-20.*", []string{"192.168.10.1", "192.168.20.255"}, []string{"192.168.21.1", "192.168.9.1"}},
	}
	for _, c := range cases {
		p, err := parseAddrPattern(c.pattern)
		if err != nil {
			t.Errorf("%q: %v", c.pattern, err)
			continue
		}
		for _, a := range c.yes {
			if !p.match(netip.MustParseAddr(a)) {
				t.Errorf("%q should match %s", c.pattern, a)
			}
		}
		for _, a := range c.no {
			if p.match(netip.MustParseAddr(a)) {
				t.Errorf("%q should not match %s", c.pattern, a)
			}
		}
		if p.match(netip.Addr{}) {
			t.Errorf("%q matches the zero address", c.pattern)
		}
	}
}

func TestAddrPatternErrors(t *testing.T) {
	for pattern, msg := range map[string]string{
		"192.168.1":         "not an IP",
		"192.168.1.256":     "not an IP",
		"192.168.1.{1,300}": "not an IP",
		"{1,2}":             "prefix ending",
		"10.*.1.*":          "must be *",
		"10.1-2.3.4":        "must be *",
		"*.1.2.3":           "first octet",
		"1.2.3.4-":          "not *, a number",
		"1.2.3.9-2":         "not *, a number",
		"1.2.3.4.5-6":       "2 to 4",
		"fe80::*":           "IPv6 wildcards",
		"a.b.c.d":           "not an IP",
		"fe80::1%eth0":      "not an IP",
		"1.2.3.4,x":         "not an IP",
	} {
		if _, err := parseAddrPattern(pattern); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: err %v, want %q", pattern, err, msg)
		}
	}
}

func TestRemoteIP(t *testing.T) {
	if ip := remoteIP(&net.TCPAddr{IP: net.ParseIP("::ffff:10.1.2.3"), Port: 5}); ip != netip.MustParseAddr("10.1.2.3") {
		t.Fatalf("mapped: %v", ip)
	}
	if ip := remoteIP(&net.UDPAddr{IP: net.ParseIP("10.1.2.3"), Port: 5}); ip != netip.MustParseAddr("10.1.2.3") {
		t.Fatalf("other addr type: %v", ip)
	}
	if ip := remoteIP(nil); ip.IsValid() {
		t.Fatalf("nil: %v", ip)
	}
}
