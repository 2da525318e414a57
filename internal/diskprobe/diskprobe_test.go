package diskprobe

import (
	"testing"
	"time"
)

func TestRunSmall(t *testing.T) {
	r, err := Run(Config{Dir: t.TempDir(), SeqBytes: 4 << 20, SyncedMiBWrites: 4, Synced4KiBWrites: 20})
	if err != nil {
		t.Fatal(err)
	}
	if r.SeqWriteBytesPerSec <= 0 || r.Sync1MiBBytesPerSec <= 0 {
		t.Fatalf("bandwidths must be positive: %+v", r)
	}
	if r.Sync4KiBLatencyP50 <= 0 || r.Sync4KiBLatencyP50 > r.Sync4KiBLatencyP99 || r.Sync4KiBLatencyP99 > r.Sync4KiBLatencyMax {
		t.Fatalf("latency percentiles out of order: %+v", r)
	}
	// A round's CPU time is some of its wall time: above zero (a write
	// and an fdatasync are system calls), and at most the mean round's
	// latency, so at most the slowest's (twice it: slack for the loop).
	if r.Sync4KiBCPU <= 0 || r.Sync4KiBCPU > 2*r.Sync4KiBLatencyMax || r.Sync1MiBCPU <= 0 {
		t.Fatalf("CPU per round: 4 KiB %v (max latency %v), 1 MiB %v", r.Sync4KiBCPU, r.Sync4KiBLatencyMax, r.Sync1MiBCPU)
	}
}

func TestPercentile(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := percentile(d, c.q); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("empty input must give 0")
	}
}
