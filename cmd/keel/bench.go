package main

// keel bench: the load generator (internal/bench) and its helpers.
//
//	keel bench -w WORKLOAD.yaml --namesrv ADDR           against a running Keel
//	keel bench -w WORKLOAD.yaml --embedded SYNC_FLUSH    against a broker started in this process
//	keel bench disk --dir DIR                            the raw disk figures
//	keel bench report ...                                docs/benchmarks.md from result files

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/keelmq/keel/internal/bench"
	"github.com/keelmq/keel/internal/config"
	"github.com/keelmq/keel/internal/diskprobe"
	"github.com/spf13/cobra"
)

type benchOptions struct {
	workload    string
	namesrv     string
	embedded    string
	dataDir     string
	configFile  string
	brokerFlush string
	output      string
	quick       bool
	duration    time.Duration
	warmup      time.Duration
	topicPrefix string
	quiet       bool
	logLevel    string
	cpuProfile  string
	memProfile  string
	blockProf   string
	traceFile   string
}

func newBenchCmd() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench -w WORKLOAD.yaml (--namesrv ADDR | --embedded SYNC_FLUSH|ASYNC_FLUSH)",
		Short: "Run a benchmark workload against Keel (or measure the disk, or write docs/benchmarks.md)",
		Long: `Run a workload file (bench/workloads/*.yaml) with Keel's lean RocketMQ client:
pipelined sends, long-polling pulls, end-to-end latency from a timestamp in
every message body. A progress line goes to stderr every second; the summary
goes to stdout (-o json for scripts).

The broker is either a running Keel (--namesrv) or one started in this process
on loopback ports and a temporary data directory (--embedded, with the given
flush type; --data-dir keeps the data, -c applies a broker.conf). With an
embedded broker the generator and the broker share the machine's CPUs, as they
would on one host anyway; the profiles (--cpuprofile and friends) then cover
both.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.workload, "workload", "w", "", "workload file (flat YAML; see bench/workloads)")
	f.StringVarP(&o.namesrv, "namesrv", "n", "", "NameServer address of a running Keel")
	f.StringVar(&o.embedded, "embedded", "", "start a broker in this process with this flushDiskType: SYNC_FLUSH or ASYNC_FLUSH")
	f.StringVar(&o.dataDir, "data-dir", "", "embedded broker's data directory (default: a temporary one, removed afterwards)")
	f.StringVarP(&o.configFile, "config", "c", "", "embedded broker's broker.conf")
	f.StringVar(&o.brokerFlush, "broker-flush", "", "the flushDiskType of the running broker, recorded in the result (with --namesrv)")
	f.StringVarP(&o.output, "output", "o", "text", "summary format: text or json")
	f.BoolVar(&o.quick, "quick", false, fmt.Sprintf("shorten the workload to about %v (a check of the machinery, not a measurement)", bench.QuickDuration))
	f.DurationVar(&o.duration, "duration", 0, "override the workload's duration")
	f.DurationVar(&o.warmup, "warmup", -1, "override the workload's warm-up")
	f.StringVar(&o.topicPrefix, "topic-prefix", "keel-bench", "topics are named <prefix>-<workload>-<n>")
	f.BoolVarP(&o.quiet, "quiet", "q", false, "no progress lines")
	f.StringVar(&o.logLevel, "log-level", "warn", "embedded broker's log level")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured run to this file")
	f.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile at the end to this file")
	f.StringVar(&o.blockProf, "blockprofile", "", "write a blocking profile of the run to this file")
	f.StringVar(&o.traceFile, "trace", "", "write a runtime execution trace of the measured run to this file (go tool trace; large: use short runs)")
	cmd.AddCommand(newBenchDiskCmd(), newBenchReportCmd())
	return cmd
}

func (o *benchOptions) load() (bench.Workload, error) {
	if o.workload == "" {
		return bench.Workload{}, usageError{errors.New("bench: -w WORKLOAD.yaml is required")}
	}
	if (o.namesrv == "") == (o.embedded == "") {
		return bench.Workload{}, usageError{errors.New("bench: give exactly one of --namesrv ADDR and --embedded FLUSH_TYPE")}
	}
	if o.output != "text" && o.output != "json" {
		return bench.Workload{}, usageError{fmt.Errorf("bench: -o %q: want text or json", o.output)}
	}
	w, err := bench.Load(o.workload)
	if err != nil {
		return w, err
	}
	if o.quick {
		w.Shorten(bench.QuickDuration)
	}
	if o.duration > 0 {
		w.Duration = o.duration
	}
	if o.warmup >= 0 {
		w.Warmup = o.warmup
	}
	return w, w.Validate()
}

func (o *benchOptions) run(cmd *cobra.Command) error {
	w, err := o.load()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	info := bench.BrokerInfo{NamesrvAddr: o.namesrv, FlushDiskType: o.brokerFlush}
	if o.embedded != "" {
		eb, err := o.startEmbedded(ctx, cmd.ErrOrStderr())
		if err != nil {
			return err
		}
		defer eb.stop()
		info = bench.BrokerInfo{NamesrvAddr: eb.namesrv, FlushDiskType: o.embedded, Embedded: true}
	}
	opt := bench.Options{NamesrvAddr: info.NamesrvAddr, TopicPrefix: o.topicPrefix}
	if !o.quiet {
		opt.Progress = cmd.ErrOrStderr()
	}
	stopProfiles, err := o.startProfiles()
	if err != nil {
		return err
	}
	res, runErr := bench.Run(ctx, w, opt)
	if err := stopProfiles(); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if res == nil {
		return runErr
	}
	res.Command = commandLine()
	res.Broker = info
	if err := o.print(cmd.OutOrStdout(), res); err != nil {
		return err
	}
	return runErr
}

func (o *benchOptions) print(w io.Writer, res *bench.Result) error {
	if o.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	return bench.WriteSummary(w, res)
}

// commandLine is the command as typed, program named keel, for reports.
func commandLine() string {
	args := append([]string{"keel"}, os.Args[1:]...)
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"$\\*?") {
			args[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(args, " ")
}

// startProfiles starts the requested profiles; the returned function stops
// them and writes the files.
func (o *benchOptions) startProfiles() (func() error, error) {
	var cpu *os.File
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return nil, err
		}
		cpu = f
	}
	if o.blockProf != "" {
		runtime.SetBlockProfileRate(10000) // one sample per 10 µs blocked
	}
	var tr *os.File
	if o.traceFile != "" {
		f, err := os.Create(o.traceFile)
		if err == nil {
			err = trace.Start(f)
		}
		if err != nil {
			if f != nil {
				f.Close()
			}
			if cpu != nil {
				pprof.StopCPUProfile()
				cpu.Close()
			}
			return nil, err
		}
		tr = f
	}
	return func() error {
		var errs []error
		if cpu != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpu.Close())
		}
		if tr != nil {
			trace.Stop()
			errs = append(errs, tr.Close())
		}
		if o.memProfile != "" {
			errs = append(errs, writeProfile("allocs", o.memProfile))
		}
		if o.blockProf != "" {
			errs = append(errs, writeProfile("block", o.blockProf))
		}
		return errors.Join(errs...)
	}, nil
}

func writeProfile(name, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup(name).WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// embeddedBroker is a NameServer and broker run by this process.
type embeddedBroker struct {
	namesrv string
	stop    func()
}

// startEmbedded starts store, NameServer and broker on 127.0.0.1 ports
// with the flush type of --embedded, as `keel serve` would.
func (o *benchOptions) startEmbedded(ctx context.Context, logw io.Writer) (*embeddedBroker, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)}
	}
	log := slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: level}))
	cfg, dir, cleanup, err := o.embeddedConfig(log)
	if err != nil {
		return nil, err
	}
	p := &parts{cfg: cfg, log: log, namesrvAddrs: cfg.NamesrvAddrs()}
	ready := make(chan struct{})
	starters := []starter{p.storeStarter()}
	starters = append(starters, p.namesrvStarters("127.0.0.1:0", true)...)
	starters = append(starters, p.brokerStarters("127.0.0.1:0")...)
	starters = append(starters, func() (service, error) { close(ready); return service{name: "bench-ready"}, nil })
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- runServices(runCtx, log, starters...) }()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		cleanup()
		return nil, fmt.Errorf("bench: embedded broker: %w", err)
	}
	log.Info("embedded broker ready", "dir", dir, "flush", cfg.FlushDiskType, "namesrv", p.namesrvAddrs[0])
	return &embeddedBroker{namesrv: p.namesrvAddrs[0], stop: func() {
		cancel()
		if err := <-done; err != nil {
			log.Error("embedded broker stop", "err", err)
		}
		cleanup()
	}}, nil
}

// embeddedConfig builds the embedded broker's config: broker.conf if
// given, the flush type and data directory from the flags.
func (o *benchOptions) embeddedConfig(log *slog.Logger) (cfg *config.Broker, dir string, cleanup func(), err error) {
	cfg = config.Default()
	if o.configFile != "" {
		var unknown []config.Unknown
		if cfg, unknown, err = config.Load(o.configFile); err != nil {
			return nil, "", nil, err
		}
		for _, u := range unknown {
			log.Warn("broker.conf key not supported; ignored", "file", o.configFile, "key", u.Key)
		}
	}
	cleanup = func() {}
	dir = o.dataDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "keel-bench-*"); err != nil {
			return nil, "", nil, err
		}
		cleanup = func() { os.RemoveAll(dir) }
	}
	err = errors.Join(cfg.SetFrom("flushDiskType", o.embedded, "--embedded"),
		cfg.SetFrom("storePathRootDir", dir, "--data-dir"), cfg.Validate())
	if err != nil {
		cleanup()
		return nil, "", nil, usageError{err}
	}
	return cfg, dir, cleanup, nil
}

func newBenchDiskCmd() *cobra.Command {
	var dir, output string
	var cfg diskprobe.Config
	var seq string
	cmd := &cobra.Command{
		Use:   "disk [--dir DIR]",
		Short: "Measure the raw disk figures: sequential write, 1 MiB write+fdatasync, 4 KiB write+fdatasync latency",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := bench.ParseSize(seq)
			if err != nil {
				return usageError{fmt.Errorf("--seq-bytes: %w", err)}
			}
			cfg.Dir, cfg.SeqBytes = dir, n
			created, err := makeProbeDir(dir)
			if err != nil {
				return err
			}
			r, err := diskprobe.Run(cfg)
			if created {
				os.Remove(dir) // empty again: the probe removes its file
			}
			if err != nil {
				return err
			}
			rep := bench.DiskReport{Command: commandLine(), Dir: dir, Result: r}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "sequential write       %.1f MB/s\n1 MiB write+fdatasync  %.1f MB/s  CPU %v a round\n"+
				"4 KiB write+fdatasync  p50 %v  p99 %v  max %v  CPU %v a round\n", r.SeqWriteBytesPerSec/1e6, r.Sync1MiBBytesPerSec/1e6,
				r.Sync1MiBCPU, r.Sync4KiBLatencyP50, r.Sync4KiBLatencyP99, r.Sync4KiBLatencyMax, r.Sync4KiBCPU)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", ".", "directory on the disk to measure (a temporary file is written and removed; a missing directory is created and removed)")
	f.StringVar(&seq, "seq-bytes", "1GiB", "bytes written for the sequential figure")
	f.IntVar(&cfg.SyncedMiBWrites, "sync-mib-writes", 256, "rounds of 1 MiB write+fdatasync")
	f.IntVar(&cfg.Synced4KiBWrites, "sync-4k-writes", 2000, "rounds of 4 KiB write+fdatasync")
	f.StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

// makeProbeDir creates the directory bench disk measures in if it does
// not exist yet (its parent must), and reports whether it did.
func makeProbeDir(dir string) (bool, error) {
	if _, err := os.Stat(dir); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return false, fmt.Errorf("bench disk: --dir %s does not exist and cannot be created: %w", dir, err)
	}
	return true, nil
}

func newBenchReportCmd() *cobra.Command {
	var rep bench.Report
	var diskFile, machineFile, goBenchFile, extraFile, out string
	cmd := &cobra.Command{
		Use:   "report --disk DISK.json --machine MACHINE.md RESULT.json...",
		Short: "Write docs/benchmarks.md from `keel bench disk -o json` and `keel bench -o json` outputs",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := readReportInputs(&rep, diskFile, machineFile, goBenchFile, extraFile, args); err != nil {
				return err
			}
			rep.Generated = time.Now()
			w := cmd.OutOrStdout()
			if out != "" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			return bench.WriteMarkdown(w, rep)
		},
	}
	f := cmd.Flags()
	f.StringVar(&diskFile, "disk", "", "output of keel bench disk -o json")
	f.StringVar(&machineFile, "machine", "", "markdown fragment describing the machine")
	f.StringVar(&goBenchFile, "gobench", "", "output of go test -bench to include verbatim")
	f.StringVar(&extraFile, "extra", "", "markdown section to include (broker process figures)")
	f.StringVar(&rep.GoBenchCommand, "gobench-command", "", "the command that produced --gobench")
	f.StringVar(&rep.Revision, "revision", "unknown", "git revision measured")
	f.BoolVar(&rep.Quick, "quick", false, "mark the figures as provisional (a --quick run)")
	f.StringVar(&out, "out", "", "write here instead of stdout")
	return cmd
}

func readReportInputs(rep *bench.Report, diskFile, machineFile, goBenchFile, extraFile string, results []string) error {
	if diskFile != "" {
		var d bench.DiskReport
		if err := readJSON(diskFile, &d); err != nil {
			return err
		}
		rep.Disk, rep.DiskCommand = &d.Result, d.Command
	}
	for _, f := range []struct {
		path string
		dst  *string
	}{{machineFile, &rep.Machine}, {goBenchFile, &rep.GoBench}, {extraFile, &rep.Extra}} {
		if f.path == "" {
			continue
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			return err
		}
		*f.dst = string(b)
	}
	for _, path := range results {
		r := new(bench.Result)
		if err := readJSON(path, r); err != nil {
			return err
		}
		rep.Results = append(rep.Results, r)
	}
	return nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// cpuProfileEnv names a file to which keel serve and keel broker write a
// CPU profile of their whole run (until they stop): the way to profile a
// broker under clients that run in other processes (docs/benchmarks.md).
const cpuProfileEnv = "KEEL_CPUPROFILE"

// startEnvCPUProfile starts the CPU profile KEEL_CPUPROFILE asks for; the
// returned function stops it and writes the file.
func startEnvCPUProfile(log *slog.Logger) (func(), error) {
	path := os.Getenv(cpuProfileEnv)
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cpuProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", cpuProfileEnv, err)
	}
	log.Warn("writing a CPU profile of this run ("+cpuProfileEnv+")", "file", path)
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			log.Error("CPU profile not written", "file", path, "err", err)
		}
	}, nil
}
