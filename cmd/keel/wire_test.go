package main

import (
	"net"
	"testing"

	"github.com/keelmq/keel/internal/config"
)

func TestAdvertisedAddrUsesBoundPort(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv4zero, Port: 40123}
	cfg := config.Default()
	tests := []struct {
		ip1, listen, want string
	}{
		{"10.0.0.5", ":0", "10.0.0.5:40123"},
		{"", "127.0.0.1:0", "127.0.0.1:40123"},
		{"", "[::1]:0", "[::1]:40123"},
	}
	for _, tt := range tests {
		cfg.BrokerIP1 = tt.ip1
		got, err := advertisedAddr(cfg, tt.listen, bound)
		if err != nil || got != tt.want {
			t.Errorf("advertisedAddr(%q, %q) = %q, %v; want %q", tt.ip1, tt.listen, got, err, tt.want)
		}
	}
}
