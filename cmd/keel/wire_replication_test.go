package main

import (
	"net"
	"testing"

	"github.com/keelmq/keel/internal/config"
)

// TestHAAdvertisedAddress: the replication address a master names is its
// listener's unless haAdvertisedAddress says otherwise (replicas that
// reach it through a proxy or a port mapping), and a slave names none.
func TestHAAdvertisedAddress(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 20911}
	cfg := config.Default()
	p := &parts{cfg: cfg, haBound: bound}
	if got := p.haAdvertised("127.0.0.1:20910"); got != "127.0.0.1:20911" {
		t.Errorf("without haAdvertisedAddress: %q, want the listener's 127.0.0.1:20911", got)
	}
	cfg.HAAdvertisedAddress = "127.0.0.1:31000"
	if got := p.haAdvertised("127.0.0.1:20910"); got != "127.0.0.1:31000" {
		t.Errorf("with haAdvertisedAddress: %q, want 127.0.0.1:31000", got)
	}
	if got := (&parts{cfg: cfg}).haAdvertised("127.0.0.1:20910"); got != "" {
		t.Errorf("a broker without a replication listener names %q", got)
	}
}
