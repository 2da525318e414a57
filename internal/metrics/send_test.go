package metrics

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkOnSend is the cost of counting one send of a kind seen before.
func BenchmarkOnSend(b *testing.B) {
	o := New(Config{}).Door("rocketmq")
	for b.Loop() {
		o.OnSend("keel-bench-official-rocketmq-cpu-0", 1, 1024, "SUCCESS", time.Millisecond)
	}
}

// Each kind of send counts in its own series, and a failed send makes no
// bytes series and no "ok" latency series.
func TestOnSendSeries(t *testing.T) {
	m := New(Config{})
	k, r := m.Door("kafka"), m.Door("rocketmq")
	for range 3 {
		r.OnSend("T", 2, 10, "SUCCESS", time.Millisecond)
		k.OnSend("T", 1, 5, "NONE", time.Millisecond)
		r.OnSend("U", 0, 7, "NO_PERMISSION", time.Millisecond)
	}
	want := map[string]float64{
		`keel_send_bytes_total{door="kafka",topic="T"}`:                              15,
		`keel_send_bytes_total{door="rocketmq",topic="T"}`:                           30,
		`keel_send_messages_total{door="kafka",result="NONE",topic="T"}`:             3,
		`keel_send_messages_total{door="rocketmq",result="NO_PERMISSION",topic="U"}`: 3,
		`keel_send_messages_total{door="rocketmq",result="SUCCESS",topic="T"}`:       6,
		`keel_send_requests_total{door="kafka",result="NONE",topic="T"}`:             3,
		`keel_send_requests_total{door="rocketmq",result="NO_PERMISSION",topic="U"}`: 3,
		`keel_send_requests_total{door="rocketmq",result="SUCCESS",topic="T"}`:       3,
		`keel_send_latency_seconds_count{door="kafka",outcome="ok"}`:                 3,
		`keel_send_latency_seconds_count{door="rocketmq",outcome="error"}`:           3,
		`keel_send_latency_seconds_count{door="rocketmq",outcome="ok"}`:              3,
	}
	got := gatherSend(t, m)
	if !maps.Equal(got, want) {
		t.Errorf("send series:\n%s\nwant\n%s", seriesText(got), seriesText(want))
	}
}

// gatherSend returns the send counters and the latency counts by series.
func gatherSend(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	fams, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		name := f.GetName()
		if !strings.HasPrefix(name, "keel_send_") {
			continue
		}
		for _, mt := range f.GetMetric() {
			var labels []string
			for _, l := range mt.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			series := "{" + strings.Join(labels, ",") + "}"
			if h := mt.GetHistogram(); h != nil {
				out[name+"_count"+series] = float64(h.GetSampleCount())
			} else {
				out[name+series] = mt.GetCounter().GetValue()
			}
		}
	}
	return out
}

func seriesText(m map[string]float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, "%s %v\n", k, m[k])
	}
	return b.String()
}
