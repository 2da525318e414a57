package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestNamesrvAddrEnv: the admin commands take the NameServer from
// $NAMESRV_ADDR when -n is not given, as RocketMQ's tools do; -n wins.
func TestNamesrvAddrEnv(t *testing.T) {
	c := startCluster(t)
	c.ok("topic", "create", "EnvTopic", "--queues", "1")
	t.Setenv(envNamesrvAddr, c.namesrv)
	code, out, stderr := runCLI(t, context.Background(), "topic", "list")
	if code != exitOK || !strings.Contains(out, "EnvTopic") {
		t.Fatalf("topic list with $NAMESRV_ADDR: exit %d\n%s\n%s", code, out, stderr)
	}
	code, _, stderr = runCLI(t, context.Background(), "topic", "list", "-n", "127.0.0.1:1", "--timeout", "2s")
	if code != exitError || !strings.Contains(stderr, "127.0.0.1:1") {
		t.Errorf("-n did not override $NAMESRV_ADDR: exit %d %q", code, stderr)
	}
}

// TestBrokerNamesrvAddrEnv: keel broker registers with $NAMESRV_ADDR when
// neither -n nor broker.conf names a NameServer.
func TestBrokerNamesrvAddrEnv(t *testing.T) {
	load := func(args ...string) string {
		t.Helper()
		var o options
		cmd := &cobra.Command{Use: "broker"}
		o.addConfigFlags(cmd)
		cmd.Flags().StringVarP(&o.namesrvAddr, "namesrv-addr", "n", "", "")
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		b, err := o.loadBroker(cmd, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		return b.NamesrvAddr
	}
	t.Setenv(envNamesrvAddr, "10.0.0.1:9876")
	if got := load(); got != "10.0.0.1:9876" {
		t.Errorf("namesrvAddr = %q, want $NAMESRV_ADDR", got)
	}
	if got := load("-n", "10.0.0.2:9876"); got != "10.0.0.2:9876" {
		t.Errorf("namesrvAddr = %q, want -n", got)
	}
	if got := load("-c", writeConf(t, "namesrvAddr=10.0.0.3:9876\n")); got != "10.0.0.3:9876" {
		t.Errorf("namesrvAddr = %q, want broker.conf's", got)
	}
}

// TestBusyPortFailsBeforeStarting: a busy address of any listener stops
// serve, broker and namesrv before any service starts (no store opened, no
// NameServer registered with), with one line naming the address and the
// flag that changes it.
func TestBusyPortFailsBeforeStarting(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()
	free := "127.0.0.1:0"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"serve http", []string{"serve", "--namesrv-listen", free, "--broker-listen", free, "--http-listen", busy},
			"HTTP listener cannot listen on " + busy + ": address already in use (choose another address with --http-listen or httpListen in broker.conf)"},
		{"serve broker", []string{"serve", "--namesrv-listen", free, "--broker-listen", busy, "--http-listen", free},
			"broker listener cannot listen on " + busy + ": address already in use (choose another address with --broker-listen or listenPort in broker.conf)"},
		{"serve namesrv", []string{"serve", "--namesrv-listen", busy, "--broker-listen", free, "--http-listen", free},
			"NameServer listener cannot listen on " + busy + ": address already in use (choose another address with --namesrv-listen)"},
		{"broker http", []string{"broker", "-n", "127.0.0.1:1", "--broker-listen", free, "--http-listen", busy},
			"HTTP listener cannot listen on " + busy},
		{"namesrv", []string{"namesrv", "--namesrv-listen", busy}, "NameServer listener cannot listen on " + busy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			args := tt.args
			if args[0] != "namesrv" {
				args = append(args, "--data-dir", dir)
			}
			start := time.Now()
			code, _, stderr := runCLI(t, context.Background(), args...)
			took := time.Since(start)
			if code != exitError || !strings.Contains(stderr, "keel: "+tt.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit %d and %q", code, stderr, exitError, tt.want)
			}
			if n := strings.Count(stderr, "\n"); strings.Contains(stderr, "listening") || strings.Contains(stderr, "store open") || n > 2 {
				t.Errorf("services started before the busy port was found (%d lines):\n%s", n, stderr)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the data directory was created: %v", err)
			}
			if took > time.Second {
				t.Errorf("took %v to fail", took)
			}
		})
	}
}
