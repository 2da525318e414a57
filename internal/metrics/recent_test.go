package metrics

import (
	"testing"
	"time"

	"github.com/keelmq/keel/internal/doorstats"
)

func TestRecentLatencyQuantilesAndWindow(t *testing.T) {
	m := New(Config{})
	t0 := m.recent.start.Add(time.Minute)
	for i := 0; i < 100; i++ {
		m.ObserveFlush(3*time.Millisecond, 4096) // bucket (2.5 ms, 5 ms]
	}
	o := observer{m.Door(doorstats.RocketMQ)}
	for i := 0; i < 10; i++ {
		o.OnSend("T", 1, 10, "SUCCESS", 700*time.Microsecond) // (0.5 ms, 1 ms]
	}
	r := m.Recent(t0)
	if r.Window != time.Minute || r.Flush.Count != 100 || r.Send.Count != 10 {
		t.Fatalf("first call: %+v", r)
	}
	// Interpolated within the bucket, as histogram_quantile does.
	if r.Flush.P50 != 3750*time.Microsecond || r.Flush.P99 != 4975*time.Microsecond {
		t.Errorf("flush p50 %v p99 %v, want 3.75ms 4.975ms", r.Flush.P50, r.Flush.P99)
	}
	if r.Send.P50 != 750*time.Microsecond {
		t.Errorf("send p50 %v, want 750µs", r.Send.P50)
	}

	// Within the window's first minutes everything since the start counts.
	for i := 0; i < 10; i++ {
		m.ObserveFlush(30*time.Millisecond, 4096) // (25 ms, 50 ms]
	}
	r = m.Recent(t0.Add(20 * time.Second))
	if r.Window != 80*time.Second || r.Flush.Count != 110 || r.Flush.P50 != 3875*time.Microsecond ||
		r.Flush.P99 != 47250*time.Microsecond {
		t.Errorf("after 80 s: %+v", r)
	}
	// Later calls count only what was observed since the snapshot at the
	// window's start.
	m.ObserveFlush(300*time.Millisecond, 1) // (250 ms, 500 ms]
	r = m.Recent(t0.Add(RecentWindow))
	if r.Window != RecentWindow || r.Flush.Count != 11 || r.Send.Count != 0 {
		t.Errorf("a window after the first call: %+v", r)
	}
	if r.Send.P50 != 0 || r.Send.P99 != 0 {
		t.Errorf("no sends in the window: %+v", r.Send)
	}

	// Past the window the old observations drop out.
	r = m.Recent(t0.Add(20*time.Second + RecentWindow))
	if r.Window != RecentWindow || r.Flush.Count != 1 || r.Flush.P50 != 375*time.Millisecond {
		t.Errorf("a window after the second call: %+v", r)
	}
	info := m.RuntimeInfo()
	if info[InfoFlushP99Millis] == "" || info[InfoSendCount] == "" {
		t.Errorf("runtime info %v", info)
	}
}

// A latency past the last bucket reads as the last finite bound.
func TestRecentLatencyOverflow(t *testing.T) {
	m := New(Config{})
	m.ObserveFlush(10*time.Second, 1)
	if r := m.Recent(time.Now()); r.Flush.P99 != 2500*time.Millisecond {
		t.Errorf("p99 %v, want 2.5s", r.Flush.P99)
	}
}
