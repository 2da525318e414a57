package bench

import (
	"fmt"
	"io"
	"strings"

	"github.com/keelmq/keel/internal/diskprobe"
)

// DiskReport is the output of `keel bench disk -o json`.
type DiskReport struct {
	Command string           `json:"command"`
	Dir     string           `json:"dir"`
	Result  diskprobe.Result `json:"result"`
}

// WriteSummary prints the final summary of a run in text.
func WriteSummary(w io.Writer, r *Result) error {
	var b strings.Builder
	wl := r.Workload
	where := "external"
	if r.Broker.Embedded {
		where = "embedded"
	}
	fmt.Fprintf(&b, "workload %s (%s): %s\n", wl.Name, wl.Mode, wl.Description)
	fmt.Fprintf(&b, "broker   %s, %s (workload expects %s)\n", orDash(r.Broker.FlushDiskType), where, orDash(wl.FlushDiskType))
	line := func(name string, t *Throughput) {
		if t == nil {
			return
		}
		l := t.Latency
		fmt.Fprintf(&b, "%-8s %d msgs in %.1fs: %.0f msg/s, %.1f MB/s; latency p50 %s p90 %s p99 %s p99.9 %s max %s; errors %d\n",
			name, t.Messages, t.Seconds, t.MsgsPerSec, t.MBPerSec, fmtDur(l.P50), fmtDur(l.P90), fmtDur(l.P99),
			fmtDur(l.P999), fmtDur(l.Max), t.Errors)
	}
	send, recv := "send", "receive"
	if wl.Mode == ModeBacklog {
		send, recv = "fill", "drain"
	}
	line(send, r.Send)
	line(recv, r.Receive)
	if len(r.SearchSteps) > 0 {
		fmt.Fprintf(&b, "max-rate %.0f msg/s held (%d steps)", r.MaxRate, len(r.SearchSteps))
		if last := r.SearchSteps[len(r.SearchSteps)-1]; !last.OK {
			fmt.Fprintf(&b, "; %.0f msg/s did not: %s", last.TargetRate, last.Why)
		}
		if r.PacedRate > 0 {
			fmt.Fprintf(&b, "; run paced at %.0f msg/s", r.PacedRate)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "totals   %d sent, %d received, %d send errors, %d receive errors, %d out of order, %.1fs\n",
		r.TotalSent, r.TotalReceived, r.TotalSendErrors, r.TotalRecvErrors, r.OutOfOrder, r.Elapsed)
	for _, k := range sortedKinds(r.Errors) {
		fmt.Fprintf(&b, "error    %s: %d\n", k, r.Errors[k])
	}
	_, err := io.WriteString(w, b.String())
	return err
}
