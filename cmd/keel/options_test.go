package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/config"
	"github.com/spf13/cobra"
)

func writeConf(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "broker.conf")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// loadWith parses args as the serve command's flags and loads the config.
func loadWith(t *testing.T, args ...string) (*config.Broker, *options, *cobra.Command, string, error) {
	t.Helper()
	var o options
	cmd := &cobra.Command{Use: "serve"}
	o.addConfigFlags(cmd)
	o.addBrokerFlags(cmd)
	o.addNamesrvFlags(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	b, err := o.loadBroker(cmd, slog.New(slog.NewTextHandler(&logs, nil)))
	return b, &o, cmd, logs.String(), err
}

func TestFlagsOverrideOnlyWhenGiven(t *testing.T) {
	conf := writeConf(t, "listenPort=30911\nstorePathRootDir=/from/file\nhttpListen=:9090\n")

	b, o, cmd, _, err := loadWith(t, "-c", conf)
	if err != nil {
		t.Fatal(err)
	}
	if b.StorePathRootDir != "/from/file" || b.ListenPort != 30911 || b.HTTPListen != ":9090" {
		t.Errorf("file values lost to flag defaults: %+v", b)
	}
	if got := o.brokerListenAddr(cmd, b); got != ":30911" {
		t.Errorf("broker listen = %q, want :30911 from listenPort", got)
	}

	b, o, cmd, _, err = loadWith(t, "-c", conf, "--data-dir", "/from/flag", "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "")
	if err != nil {
		t.Fatal(err)
	}
	if b.StorePathRootDir != "/from/flag" || b.ListenPort != 0 || b.HTTPListen != "" {
		t.Errorf("flags did not override the file: %+v", b)
	}
	if got := o.brokerListenAddr(cmd, b); got != "127.0.0.1:0" {
		t.Errorf("broker listen = %q, want the flag", got)
	}
}

func TestDefaultsWithoutFile(t *testing.T) {
	b, o, cmd, _, err := loadWith(t)
	if err != nil {
		t.Fatal(err)
	}
	if b.StorePathRootDir != "./keel-data" || b.FlushDiskType != config.SyncFlush || o.brokerListenAddr(cmd, b) != ":10911" {
		t.Errorf("defaults: %+v listen %s", b, o.brokerListenAddr(cmd, b))
	}
}

func TestUnknownKeysWarnOrFail(t *testing.T) {
	conf := writeConf(t, "brokerName=b\nsendMessageThreadPoolNums=8\nbrokername=x\n")
	_, _, _, logs, err := loadWith(t, "-c", conf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, "key=sendMessageThreadPoolNums") || !strings.Contains(logs, `did you mean \"brokerName\"?`) {
		t.Errorf("warnings missing:\n%s", logs)
	}
	_, _, _, _, err = loadWith(t, "-c", conf, "--strict-config")
	if err == nil || !strings.Contains(err.Error(), "line 2: unknown key \"sendMessageThreadPoolNums\"") ||
		!strings.Contains(err.Error(), "line 3") {
		t.Errorf("--strict-config: err = %v", err)
	}
}

// TestUnknownKeyHints: a misspelt key names the key it is nearest to; a
// key near none is logged without an empty hint.
func TestUnknownKeyHints(t *testing.T) {
	conf := writeConf(t, "flushDiskTyp=ASYNC_FLUSH\nfooBarBaz=1\n")
	_, _, _, logs, err := loadWith(t, "-c", conf)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs, `key=flushDiskTyp hint="did you mean \"flushDiskType\"?"`) {
		t.Errorf("no suggestion for flushDiskTyp:\n%s", logs)
	}
	if !strings.Contains(logs, "key=fooBarBaz") || strings.Contains(logs, `hint=""`) {
		t.Errorf("want fooBarBaz reported without an empty hint:\n%s", logs)
	}
}

func TestInvalidValuesNameTheirOrigin(t *testing.T) {
	conf := writeConf(t, "brokerName=b\nfileReservedTime=0\n")
	_, _, _, _, err := loadWith(t, "-c", conf)
	if err == nil || !strings.Contains(err.Error(), `fileReservedTime="0" (`+conf+`:2)`) {
		t.Errorf("err = %v", err)
	}
	_, _, _, _, err = loadWith(t, "--amqp-listen", "", "--broker-listen", ":99999")
	if err == nil || !strings.Contains(err.Error(), `listenPort="99999" (--broker-listen)`) {
		t.Errorf("err = %v", err)
	}
	_, _, _, _, err = loadWith(t, "--amqp-listen", "", "--broker-listen", "nocolon")
	if err == nil || !strings.Contains(err.Error(), "--broker-listen") {
		t.Errorf("err = %v", err)
	}
}

func runCLI(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, context.Background(), "version")
	if code != exitOK || !strings.HasPrefix(out, "keel dev (") {
		t.Fatalf("version: code %d out %q", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"serve", "--no-such-flag"},
		{"serve", "--log-level", "loud"},
		{"broker"}, // no NameServer
	} {
		code, _, stderr := runCLI(t, context.Background(), args...)
		if code != exitUsage || !strings.HasPrefix(stderr, "keel: ") {
			t.Errorf("%q: code %d stderr %q, want %d", args, code, stderr, exitUsage)
		}
	}
}

func TestBadConfigFails(t *testing.T) {
	conf := writeConf(t, "flushDiskType=SYNC\n")
	code, _, stderr := runCLI(t, context.Background(), "serve", "-c", conf, "--amqp-listen", "", "--broker-listen", "127.0.0.1:0", "--kafka-listen", "", "--http-listen", "127.0.0.1:0", "--namesrv-listen", "127.0.0.1:0")
	if code != exitError || !strings.Contains(stderr, `flushDiskType="SYNC"`) {
		t.Fatalf("code %d stderr %q", code, stderr)
	}
}

func TestCheckMissingStoreFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, _, stderr := runCLI(t, ctx, "check", "--data-dir", filepath.Join(t.TempDir(), "none"))
	if code == exitOK {
		t.Fatalf("check of a missing store succeeded; stderr %q", stderr)
	}
}

// TestUnknownSubcommand: a misspelt subcommand of any command group is a
// bad command line (exit 2) that names the nearest command.
func TestUnknownSubcommand(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"topic", "lst"}, `unknown command "lst" for "keel topic"; did you mean "list"?`},
		{[]string{"group", "lsit"}, `unknown command "lsit" for "keel group"; did you mean "list"?`},
		{[]string{"msg", "snd", "--topic", "T"}, `did you mean "send"?`},
		{[]string{"dlq", "resnd"}, `did you mean "resend"?`},
		{[]string{"txn", "lis"}, `did you mean "list"?`},
		{[]string{"serv"}, `unknown command "serv" for "keel"; did you mean "serve"?`},
		{[]string{"topic", "zzzzzz"}, `unknown command "zzzzzz" for "keel topic" (see 'keel topic --help')`},
		{[]string{"bench", "dsk"}, `unknown command "dsk" for "keel bench"; did you mean "disk"?`},
		{[]string{"topic", "list", "extra"}, `unknown command "extra" for "keel topic list"`},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCLI(t, context.Background(), tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.want) || stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d and %q", tt.args, code, stdout, stderr, exitUsage, tt.want)
		}
	}
	// Every group of the tree, not only those above.
	var groups []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasSubCommands() {
			groups = append(groups, c)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd(io.Discard, io.Discard))
	for _, g := range groups {
		args := append(strings.Fields(g.CommandPath())[1:], "no-such-command")
		if code, _, _ := runCLI(t, context.Background(), args...); code != exitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, exitUsage)
		}
	}
	// A group alone prints its help, as --help does.
	if code, stdout, _ := runCLI(t, context.Background(), "topic"); code != exitOK || !strings.Contains(stdout, "keel topic [command]") {
		t.Errorf("keel topic: exit %d, stdout %q", code, stdout)
	}
}

// TestDoorPortsFollowListenPort: a second broker on the host, given only
// its own listenPort, moves the HTTP, AMQP and Kafka defaults with it; a
// door's address given by flag or file stays as given.
func TestDoorPortsFollowListenPort(t *testing.T) {
	b, _, _, _, err := loadWith(t, "--broker-listen", ":11011")
	if err != nil {
		t.Fatal(err)
	}
	if b.HTTPListen != "127.0.0.1:8180" || b.AMQPListen != "127.0.0.1:5772" || b.KafkaListen != "127.0.0.1:9192" {
		t.Errorf("listenPort 11011: http %s amqp %s kafka %s; want 8180, 5772, 9192", b.HTTPListen, b.AMQPListen, b.KafkaListen)
	}
	b, _, _, _, err = loadWith(t, "-c", writeConf(t, "listenPort=11011\namqpListen=127.0.0.1:5672\n"), "--kafka-listen", "127.0.0.1:9092")
	if err != nil {
		t.Fatal(err)
	}
	if b.HTTPListen != "127.0.0.1:8180" || b.AMQPListen != "127.0.0.1:5672" || b.KafkaListen != "127.0.0.1:9092" {
		t.Errorf("given addresses moved: http %s amqp %s kafka %s", b.HTTPListen, b.AMQPListen, b.KafkaListen)
	}
	b, _, _, _, err = loadWith(t)
	if err != nil || b.HTTPListen != config.DefaultHTTPListen || b.AMQPListen != config.DefaultAMQPListen || b.KafkaListen != config.DefaultKafkaListen {
		t.Errorf("defaults moved on listenPort 10911: %+v %v", b, err)
	}
}
