package main

// Shared plumbing of the admin commands (topic, group, msg, dlq): the
// NameServer flag, the output format, the admin client, and table/JSON
// output. The commands talk to a running cluster over the remoting protocol
// through internal/admin, the same code the web console uses.

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keelmq/keel/internal/admin"
	"github.com/spf13/cobra"
)

// adminFlags are the persistent flags of an admin command group.
type adminFlags struct {
	namesrv string
	output  string
	timeout time.Duration

	accessKey, secretKey string // ACL credentials
	tls, tlsInsecure     bool
	tlsCA                string
}

// Environment variables holding the ACL credentials (so the secret need
// not be on the command line).
const (
	envAccessKey = "KEEL_ACCESS_KEY"
	envSecretKey = "KEEL_SECRET_KEY"
)

// envNamesrvAddr names the NameServers when -n is not given, as for
// RocketMQ's mqadmin and broker.
const envNamesrvAddr = "NAMESRV_ADDR"

// defaultNamesrv is $NAMESRV_ADDR, else admin.DefaultNamesrv.
func defaultNamesrv() string {
	if v := strings.TrimSpace(os.Getenv(envNamesrvAddr)); v != "" {
		return v
	}
	return admin.DefaultNamesrv
}

func (f *adminFlags) add(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVarP(&f.namesrv, "namesrv", "n", defaultNamesrv(), "NameServer addresses host:port[;host:port] (the default is $"+envNamesrvAddr+" when set)")
	pf.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	pf.DurationVar(&f.timeout, "timeout", admin.DefaultTimeout, "timeout of each request")
	pf.StringVar(&f.accessKey, "access-key", os.Getenv(envAccessKey), "ACL access key (default $"+envAccessKey+")")
	pf.StringVar(&f.secretKey, "secret-key", os.Getenv(envSecretKey), "ACL secret key (default $"+envSecretKey+")")
	pf.BoolVar(&f.tls, "tls", false, "connect with TLS")
	pf.StringVar(&f.tlsCA, "tls-ca", "", "PEM file of the CA that signed the servers' certificates (implies --tls)")
	pf.BoolVar(&f.tlsInsecure, "tls-insecure", false, "do not verify the servers' certificates (implies --tls)")
}

// tlsConfig returns the client TLS configuration, or nil without TLS.
func (f *adminFlags) tlsConfig() (*tls.Config, error) {
	if !f.tls && f.tlsCA == "" && !f.tlsInsecure {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: f.tlsInsecure}
	if f.tlsCA != "" {
		pem, err := os.ReadFile(f.tlsCA)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate found", f.tlsCA)
		}
	}
	return cfg, nil
}

// client validates the flags and returns an admin client, which tells
// stderr when it reads a broker group from its slave; close it.
func (f *adminFlags) client(stderr io.Writer) (*admin.Client, error) {
	if f.output != "table" && f.output != "json" {
		return nil, usageError{fmt.Errorf("-o %q: want table or json", f.output)}
	}
	var addrs []string
	for _, a := range strings.Split(f.namesrv, ";") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil, usageError{fmt.Errorf("--namesrv is empty")}
	}
	if (f.accessKey == "") != (f.secretKey == "") {
		return nil, usageError{fmt.Errorf("give both --access-key and --secret-key (or $%s and $%s)", envAccessKey, envSecretKey)}
	}
	tc, err := f.tlsConfig()
	if err != nil {
		return nil, err
	}
	return admin.New(admin.Config{NamesrvAddrs: addrs, Timeout: f.timeout, AccessKey: f.accessKey,
		SecretKey: f.secretKey, TLS: tc, OnSlaveRead: func(r admin.SlaveRead) { fmt.Fprintf(stderr, "keel: %s\n", r) }}), nil
}

// emit writes v as indented JSON with -o json, else calls table with a
// tabwriter that is flushed afterwards.
func (f *adminFlags) emit(w io.Writer, v any, table func(tw *tabwriter.Writer)) error {
	if f.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := newTable(w)
	table(tw)
	return tw.Flush()
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

// row writes one tab-separated table row.
func row(w io.Writer, cols ...any) {
	for i, c := range cols {
		if i > 0 {
			io.WriteString(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	io.WriteString(w, "\n")
}

// adminRun wraps a command body: it builds the client from f, runs fn and
// closes the client.
func adminRun(f *adminFlags, fn func(cmd *cobra.Command, args []string, c *admin.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, err := f.client(cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(cmd, args, c)
	}
}

// fmtTime renders a time for tables (local time, milliseconds); zero: "-".
func fmtTime(t time.Time) string {
	if t.IsZero() || t.UnixMilli() <= 0 {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05.000")
}

// parseTime accepts RFC 3339, "2006-01-02 15:04:05", Unix milliseconds, or
// a duration meaning that long ago ("90m", "2h").
func parseTime(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		return time.UnixMilli(ms), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339, \"2006-01-02 15:04:05\", Unix ms or a duration ago like 2h", s)
}

// dash renders an empty string as "-".
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// truncate shortens s to n runes with an ellipsis.
func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
