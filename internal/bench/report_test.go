package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/keelmq/keel/internal/diskprobe"
)

func TestChecksAndRatios(t *testing.T) {
	disk := &diskprobe.Result{SeqWriteBytesPerSec: 400e6, Sync1MiBBytesPerSec: 200e6, Sync4KiBLatencyP99: 2 * time.Millisecond}
	w := DefaultWorkload()
	w.Targets = Targets{MBPerSec: 50, Sync1MiBRatio: 0.4, SeqWriteRatio: 0.25, P99Sync4KiBFactor: 1.5, P99: 3 * time.Millisecond}
	r := &Result{Workload: w, Send: &Throughput{MBPerSec: 100, MsgsPerSec: 97656,
		Latency: Summary{P50: time.Millisecond, P99: 4 * time.Millisecond}}}
	f := primary(r)
	f.ratios(disk)
	if f.seqRatio != 0.25 || f.sync1Ratio != 0.5 || f.p99Factor != 2 || f.latName != "send" {
		t.Fatalf("figures %+v", f)
	}
	got := map[string]bool{}
	for _, c := range checks(r, f) {
		got[c.what] = c.met
	}
	want := map[string]bool{"MB/s": true, "of 1 MiB write+fdatasync": true, "of sequential write": true,
		"send p99": false, "send p99 / 4 KiB fdatasync p99": false}
	if len(got) != len(want) {
		t.Fatalf("checks %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("check %q met=%v, want %v (all: %v)", k, got[k], v, got)
		}
	}
}

func TestPacedRateSlack(t *testing.T) {
	w := DefaultWorkload()
	w.ProducerRate, w.Targets.MsgsPerSec = 1000, 1000
	r := &Result{Workload: w, Send: &Throughput{MsgsPerSec: 990}}
	if cs := checks(r, primary(r)); len(cs) != 1 || !cs[0].met {
		t.Fatalf("a paced run at 99%% of its pace must meet a target equal to the pace: %+v", cs)
	}
	r.Send.MsgsPerSec = 900
	if cs := checks(r, primary(r)); cs[0].met {
		t.Fatalf("90%% of the pace must not meet it: %+v", cs)
	}
}

func TestWriteMarkdown(t *testing.T) {
	w := DefaultWorkload()
	w.Name, w.Description, w.Mode, w.Consumers = "e2e", "end to end", ModeProduceConsume, 1
	w.Targets.P50 = time.Millisecond
	r := &Result{Workload: w, Command: "keel bench -w e2e.yaml --embedded SYNC_FLUSH",
		Broker: BrokerInfo{FlushDiskType: "SYNC_FLUSH", Embedded: true},
		Send:   &Throughput{Messages: 10, MsgsPerSec: 5, Latency: Summary{P50: 300 * time.Microsecond}},
		Receive: &Throughput{Messages: 10, MsgsPerSec: 5,
			Latency: Summary{P50: 2 * time.Millisecond, P99: 3 * time.Millisecond}},
		MaxRate: 100, SearchSteps: []SearchStep{{TargetRate: 100, OK: true}, {TargetRate: 125, Why: "p99"}},
		Errors: map[string]uint64{"send: timeout": 2}}
	var b bytes.Buffer
	rep := Report{Revision: "r1", Machine: "| CPUs | `nproc` | 2 |", Disk: &diskprobe.Result{SeqWriteBytesPerSec: 1e9},
		DiskCommand: "keel bench disk", Results: []*Result{r}, Quick: true, Extra: "## Extra\n", GoBench: "BenchmarkX 1 ns/op",
		GoBenchCommand: "go test -bench X"}
	if err := WriteMarkdown(&b, rep); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{"`r1`", "provisional", "`nproc`", "`keel bench disk`", "1000.0 MB/s",
		"| [e2e](#e2e) | SYNC_FLUSH | end-to-end p50 ≤ 1ms | 2ms | **no** |", "`" + r.Command + "`",
		"highest rate that held 100 msg/s", "no: p99", "`send: timeout`: 2", "## Extra", "`go test -bench X`"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	if t.Failed() {
		t.Log(md)
	}
}
