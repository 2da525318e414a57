package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/keelmq/keel/internal/config"
	"github.com/spf13/cobra"
)

// options are the flags shared by the commands. A flag overrides broker.conf
// only when it is given on the command line (cobra's Changed), so the
// defaults shown in --help never mask a value from the file.
type options struct {
	configFile    string
	strictConfig  bool
	logLevel      string
	dataDir       string
	brokerListen  string
	namesrvListen string
	httpListen    string
	amqpListen    string
	namesrvAddr   string
	kafkaListen   string

	repairCorruption bool
	http             httpOptions // --console-write (http.go)
}

func (o *options) addConfigFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVarP(&o.configFile, "config", "c", "", "broker.conf file (Java properties, RocketMQ key names)")
	f.BoolVar(&o.strictConfig, "strict-config", false, "treat unknown broker.conf keys as errors")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	f.StringVar(&o.dataDir, "data-dir", config.DefaultStorePathRootDir, "data directory (overrides storePathRootDir)")
}

func (o *options) addBrokerFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.brokerListen, "broker-listen", ":10911", "broker listen address (overrides listenPort)")
	f.StringVar(&o.httpListen, "http-listen", config.DefaultHTTPListen, "HTTP listen address for /metrics, /healthz, /readyz and the web console (overrides httpListen; empty: off; beyond loopback it needs httpToken or aclEnable; unset, its port moves by listenPort-10911)")
	f.StringVar(&o.amqpListen, "amqp-listen", config.DefaultAMQPListen, "AMQP 0-9-1 listen address (overrides amqpListen; empty: off; unset, its port moves by listenPort-10911)")
	f.StringVar(&o.kafkaListen, "kafka-listen", config.DefaultKafkaListen, "Kafka listen address (overrides kafkaListen; empty: off; loopback by default: without aclEnable it authenticates nobody; unset, its port moves by listenPort-10911)")
	f.BoolVar(&o.repairCorruption, "repair-corruption", false,
		"if the CommitLog is corrupt in the middle, move the bad part to <data-dir>/quarantine and start, instead of refusing to start")
}

func (o *options) addNamesrvFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.namesrvListen, "namesrv-listen", ":9876", "NameServer listen address")
}

// newLogger returns the process logger writing text to w.
func (o *options) newLogger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)}
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})), nil
}

// loadBroker reads the config file (if any) over the defaults, reports its
// unknown keys, applies the flags that were given, and validates the result.
func (o *options) loadBroker(cmd *cobra.Command, log *slog.Logger) (*config.Broker, error) {
	b := config.Default()
	if o.configFile != "" {
		var unknown []config.Unknown
		var err error
		b, unknown, err = config.Load(o.configFile)
		if err != nil {
			return nil, err
		}
		if err := o.reportUnknown(unknown, log); err != nil {
			return nil, err
		}
	}
	if err := o.applyFlags(cmd, b); err != nil {
		return nil, err
	}
	if err := b.DeriveDoorPorts(); err != nil { // after the flags: what they set stays
		return nil, err
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

func (o *options) reportUnknown(unknown []config.Unknown, log *slog.Logger) error {
	if o.strictConfig && len(unknown) > 0 {
		msgs := make([]string, len(unknown))
		for i, u := range unknown {
			msgs[i] = o.configFile + ": " + u.String()
		}
		return fmt.Errorf("config: unknown keys (--strict-config):\n  %s", strings.Join(msgs, "\n  "))
	}
	for _, u := range unknown {
		attrs := []any{"file", o.configFile, "line", u.Line, "key", u.Key}
		if u.Hint != "" {
			attrs = append(attrs, "hint", u.Hint)
		}
		log.Warn("broker.conf key not supported; ignored", attrs...)
	}
	return nil
}

// applyFlags lets the flags given on the command line override the file.
func (o *options) applyFlags(cmd *cobra.Command, b *config.Broker) error {
	changed := func(name string) bool {
		f := cmd.Flags().Lookup(name)
		return f != nil && f.Changed
	}
	var errs []error
	set := func(flag, key, value string) {
		if changed(flag) {
			errs = append(errs, b.SetFrom(key, value, "--"+flag))
		}
	}
	set("data-dir", "storePathRootDir", o.dataDir)
	set("http-listen", "httpListen", o.httpListen)
	set("amqp-listen", "amqpListen", o.amqpListen)
	set("namesrv-addr", "namesrvAddr", o.namesrvAddr)
	set("kafka-listen", "kafkaListen", o.kafkaListen)
	if f := cmd.Flags().Lookup("namesrv-addr"); f != nil && !f.Changed && b.NamesrvAddr == "" {
		if env := strings.TrimSpace(os.Getenv(envNamesrvAddr)); env != "" {
			errs = append(errs, b.SetFrom("namesrvAddr", env, "$"+envNamesrvAddr))
		}
	}
	if changed("broker-listen") {
		_, port, err := net.SplitHostPort(o.brokerListen)
		if err != nil {
			return usageError{fmt.Errorf("--broker-listen %q: %w", o.brokerListen, err)}
		}
		set("broker-listen", "listenPort", port)
	}
	return errors.Join(errs...)
}

// brokerListenAddr is the address the broker listens on: --broker-listen if
// given, else all interfaces on listenPort.
func (o *options) brokerListenAddr(cmd *cobra.Command, b *config.Broker) string {
	if f := cmd.Flags().Lookup("broker-listen"); f != nil && f.Changed {
		return o.brokerListen
	}
	return net.JoinHostPort("", strconv.Itoa(b.ListenPort))
}
