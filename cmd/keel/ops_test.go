package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

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
