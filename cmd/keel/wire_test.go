package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/remoting"
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
		got, err := advertisedAddr(cfg, tt.listen, bound, slog.New(slog.DiscardHandler))
		if err != nil || got != tt.want {
			t.Errorf("advertisedAddr(%q, %q) = %q, %v; want %q", tt.ip1, tt.listen, got, err, tt.want)
		}
	}
}

// TestAdvertisedAddrLoopbackOnly: on a host with loopback only, a broker
// listening on every interface advertises 127.0.0.1 and warns, rather
// than refusing to start.
func TestAdvertisedAddrLoopbackOnly(t *testing.T) {
	bound := &net.TCPAddr{IP: net.IPv4zero, Port: 40123}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	lo := []net.Addr{&net.IPNet{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(8, 32)}, &net.IPNet{IP: net.IPv6loopback, Mask: net.CIDRMask(128, 128)}}
	got, err := advertisedAddrFrom(config.Default(), ":10911", bound, lo, log)
	if err != nil || got != "127.0.0.1:40123" {
		t.Fatalf("loopback only: %q, %v; want 127.0.0.1:40123", got, err)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "set brokerIP1") {
		t.Errorf("no warning naming brokerIP1: %s", logs.String())
	}
	// An interface beyond loopback is advertised as before, silently.
	logs.Reset()
	eth := append(lo, &net.IPNet{IP: net.IPv4(10, 1, 2, 3), Mask: net.CIDRMask(24, 32)})
	if got, err := advertisedAddrFrom(config.Default(), ":10911", bound, eth, log); err != nil || got != "10.1.2.3:40123" || logs.Len() != 0 {
		t.Errorf("with 10.1.2.3: %q, %v, logs %q", got, err, logs.String())
	}
}

func TestRemotingServiceServesAndStops(t *testing.T) {
	h := remoting.HandlerFunc(func(_ context.Context, _ *remoting.Conn, req *remoting.Command) *remoting.Command {
		return req.NewResponse(0, "pong")
	})
	var addr net.Addr
	start := func() (service, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return service{}, err
		}
		s, a, err := remotingService("test server", ln, remoting.ServerConfig{}, h, nil)
		addr = a
		return s, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- runServices(ctx, discard, start, func() (service, error) { close(ready); return service{name: "marker"}, nil })
	}()
	<-ready
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	cl, err := remoting.Dial(dctx, addr.String(), remoting.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(dctx, remoting.NewRequest(105, nil, nil))
	if err != nil || resp.Remark != "pong" {
		t.Fatalf("Invoke = %+v, %v", resp, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runServices: %v", err)
	}
	select {
	case <-cl.Done():
	case <-dctx.Done():
		t.Fatal("client connection still open after shutdown")
	}
}

func TestBindListenersBusyAddress(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	ls, err := bindListeners(listenSpec{listenNamesrv, "127.0.0.1:0", namesrvListenFlag},
		listenSpec{listenHTTP, busy, httpListenFlag})
	want := "HTTP listener cannot listen on " + busy + ": address already in use (choose another address with --http-listen or httpListen in broker.conf)"
	if err == nil || err.Error() != want || ls != nil {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
}
