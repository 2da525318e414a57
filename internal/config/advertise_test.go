package config

import (
	"errors"
	"net"
	"testing"
)

func TestAdvertiseHost(t *testing.T) {
	ipnet := func(s string) net.Addr {
		ip, n, err := net.ParseCIDR(s)
		if err != nil {
			t.Fatal(err)
		}
		n.IP = ip
		return n
	}
	ifaces := []net.Addr{ipnet("127.0.0.1/8"), ipnet("::1/128"), ipnet("fe80::1/64"),
		ipnet("169.254.3.4/16"), ipnet("2001:db8::5/64"), ipnet("192.168.1.7/24"), ipnet("10.1.1.1/8")}
	tests := []struct {
		ip1, listen string
		addrs       []net.Addr
		want        string
		wantErr     error
	}{
		{"10.9.9.9", ":10911", ifaces, "10.9.9.9", nil},
		{"", "192.168.5.5:10911", ifaces, "192.168.5.5", nil},
		{"", "127.0.0.1:0", ifaces, "127.0.0.1", nil},
		{"", "broker.local:10911", ifaces, "broker.local", nil},
		{"", ":10911", ifaces, "192.168.1.7", nil},
		{"", "0.0.0.0:10911", ifaces, "192.168.1.7", nil},
		{"", "[::]:10911", ifaces, "192.168.1.7", nil},
		{"", ":10911", []net.Addr{&net.IPAddr{IP: net.IPv4(172, 16, 0, 1)}}, "172.16.0.1", nil},
		{"", ":10911", ifaces[:5], "", ErrNoAdvertiseIP},
	}
	for _, tt := range tests {
		got, err := AdvertiseHost(tt.ip1, tt.listen, tt.addrs)
		if got != tt.want || !errors.Is(err, tt.wantErr) {
			t.Errorf("AdvertiseHost(%q, %q) = %q, %v; want %q, %v", tt.ip1, tt.listen, got, err, tt.want, tt.wantErr)
		}
	}
	if _, err := AdvertiseHost("", "no-port", nil); err == nil {
		t.Error("AdvertiseHost with a bad listen address succeeded")
	}
}
