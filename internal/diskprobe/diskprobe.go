// Package diskprobe measures the raw figures of the disk under a directory,
// the yardsticks every storage benchmark of Keel is reported against:
//
//   - sequential write bandwidth: large writes, one fdatasync at the end
//     (what `dd bs=1M conv=fdatasync` reports);
//   - 1 MiB write+fdatasync bandwidth: the ceiling for group commit;
//   - 4 KiB write+fdatasync latency: the floor for a single synchronous send.
//
// With the last two goes the CPU time (user+system, of the probing thread)
// of one write+fdatasync round: what each group commit costs the process
// beyond its bytes.
//
// It writes through the real filesystem (not vfs: the point is the device)
// into a temporary file it removes afterwards.
package diskprobe

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// Config bounds a probe run.
type Config struct {
	Dir              string // where the probe file is created
	SeqBytes         int64  // total bytes for the sequential write (default 1 GiB)
	SyncedMiBWrites  int    // number of 1 MiB write+fdatasync rounds (default 256)
	Synced4KiBWrites int    // number of 4 KiB write+fdatasync rounds (default 2000)
}

// Result holds the measured figures.
type Result struct {
	SeqWriteBytesPerSec float64       `json:"seq_write_bytes_per_sec"`
	Sync1MiBBytesPerSec float64       `json:"sync_1mib_bytes_per_sec"`
	Sync4KiBLatencyP50  time.Duration `json:"sync_4kib_latency_p50_ns"`
	Sync4KiBLatencyP99  time.Duration `json:"sync_4kib_latency_p99_ns"`
	Sync4KiBLatencyMax  time.Duration `json:"sync_4kib_latency_max_ns"`
	Sync1MiBCPU         time.Duration `json:"sync_1mib_cpu_per_round_ns"` // CPU time of one 1 MiB write+fdatasync
	Sync4KiBCPU         time.Duration `json:"sync_4kib_cpu_per_round_ns"` // CPU time of one 4 KiB write+fdatasync
}

func (c *Config) setDefaults() {
	if c.SeqBytes <= 0 {
		c.SeqBytes = 1 << 30
	}
	if c.SyncedMiBWrites <= 0 {
		c.SyncedMiBWrites = 256
	}
	if c.Synced4KiBWrites <= 0 {
		c.Synced4KiBWrites = 2000
	}
}

// Run performs the three measurements in order.
func Run(cfg Config) (Result, error) {
	cfg.setDefaults()
	var r Result
	var err error
	if r.SeqWriteBytesPerSec, err = seqWrite(cfg.Dir, cfg.SeqBytes); err != nil {
		return r, err
	}
	if r.Sync1MiBBytesPerSec, r.Sync1MiBCPU, err = syncedWrites(cfg.Dir, 1<<20, cfg.SyncedMiBWrites, nil); err != nil {
		return r, err
	}
	lat := make([]time.Duration, 0, cfg.Synced4KiBWrites)
	if _, r.Sync4KiBCPU, err = syncedWrites(cfg.Dir, 4096, cfg.Synced4KiBWrites, &lat); err != nil {
		return r, err
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	r.Sync4KiBLatencyP50 = percentile(lat, 0.50)
	r.Sync4KiBLatencyP99 = percentile(lat, 0.99)
	r.Sync4KiBLatencyMax = lat[len(lat)-1]
	return r, nil
}

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func createProbeFile(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "keel-diskprobe-*")
	if err != nil {
		return nil, fmt.Errorf("diskprobe: create probe file: %w", err)
	}
	return f, nil
}

func removeProbeFile(f *os.File) {
	name := f.Name()
	f.Close()
	os.Remove(name)
}

func fillPattern(b []byte) {
	for i := range b {
		b[i] = byte(i*7 + 13)
	}
}

func seqWrite(dir string, total int64) (float64, error) {
	f, err := createProbeFile(dir)
	if err != nil {
		return 0, err
	}
	defer removeProbeFile(f)
	buf := make([]byte, 1<<20)
	fillPattern(buf)
	start := time.Now()
	for off := int64(0); off < total; off += int64(len(buf)) {
		if _, err := f.WriteAt(buf, off); err != nil {
			return 0, fmt.Errorf("diskprobe: sequential write: %w", err)
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return 0, fmt.Errorf("diskprobe: fdatasync: %w", err)
	}
	return float64(total) / time.Since(start).Seconds(), nil
}

// syncedWrites appends size-byte writes each followed by fdatasync and
// returns the bandwidth and the CPU time of a round (the thread's
// user+system time over the rounds, divided by them; 0 if the kernel does
// not report it); when lat is non-nil it records each round's latency.
func syncedWrites(dir string, size, rounds int, lat *[]time.Duration) (float64, time.Duration, error) {
	f, err := createProbeFile(dir)
	if err != nil {
		return 0, 0, err
	}
	defer removeProbeFile(f)
	buf := make([]byte, size)
	fillPattern(buf)
	runtime.LockOSThread() // the rounds run on one thread, whose CPU time is theirs
	defer runtime.UnlockOSThread()
	cpu0, cpuOK := threadCPU()
	start := time.Now()
	for i := 0; i < rounds; i++ {
		t0 := time.Now()
		if _, err := f.WriteAt(buf, int64(i)*int64(size)); err != nil {
			return 0, 0, fmt.Errorf("diskprobe: write: %w", err)
		}
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return 0, 0, fmt.Errorf("diskprobe: fdatasync: %w", err)
		}
		if lat != nil {
			*lat = append(*lat, time.Since(t0))
		}
	}
	elapsed := time.Since(start)
	var perRound time.Duration
	if cpu1, ok := threadCPU(); ok && cpuOK && rounds > 0 {
		perRound = (cpu1 - cpu0) / time.Duration(rounds)
	}
	return float64(size) * float64(rounds) / elapsed.Seconds(), perRound, nil
}

// threadCPU returns the calling thread's user+system CPU time.
func threadCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
