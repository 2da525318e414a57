package metrics

// Recent send and flush latency for the console: p50 and p99 over the last
// RecentWindow, estimated from the keel_send_latency_seconds and
// keel_store_flush_latency_seconds histograms the way Prometheus'
// histogram_quantile does (linear within a bucket). Recent keeps a few
// snapshots of the histograms' cumulative bucket counts, taken when it is
// called (at most one per recentStep), and subtracts the oldest one inside
// the window from the current counts; nothing runs in the background, and
// the observation path is unchanged.

import (
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// RecentWindow is how far back Recent looks.
const RecentWindow = 5 * time.Minute

// recentStep is the spacing of the kept snapshots.
const recentStep = 10 * time.Second

// Quantiles are the median and the 99th percentile of a latency over a
// window; Count is the number of observations in it (0: none, and the
// quantiles are 0).
type Quantiles struct {
	Count    uint64
	P50, P99 time.Duration
}

// RecentLatency is the recent send and flush latency.
type RecentLatency struct {
	// Window is the time the figures cover: about RecentWindow; less when
	// the process is younger, more when Recent was not called for longer
	// (its snapshots are taken by its calls).
	Window time.Duration
	Send   Quantiles // receipt to response of send requests, every outcome
	Flush  Quantiles // CommitLog fdatasync rounds
}

// buckets are cumulative counts at the histogram's upper bounds.
type buckets struct {
	upper []float64
	cum   []uint64
	count uint64
}

type snapshot struct {
	at          time.Time
	send, flush buckets
}

type recentState struct {
	start time.Time // when counting began: the first baseline

	mu    sync.Mutex
	snaps []snapshot // oldest first, spaced by at least recentStep; snaps[0] is the baseline
}

// Recent returns p50 and p99 of the send and flush latency over the last
// RecentWindow (as of now).
func (m *Metrics) Recent(now time.Time) RecentLatency {
	cur := snapshot{at: now, send: readBuckets(m.sendLatency), flush: readBuckets(m.flushLatency)}
	r := &m.recent
	r.mu.Lock()
	defer r.mu.Unlock()
	// Keep one snapshot at or before the window's start: the baseline.
	for len(r.snaps) > 1 && now.Sub(r.snaps[1].at) >= RecentWindow {
		r.snaps = r.snaps[1:]
	}
	if len(r.snaps) == 0 { // the start: nothing observed yet
		r.snaps = append(r.snaps, snapshot{at: r.start})
	}
	base, from := r.snaps[0], r.snaps[0].at
	if n := len(r.snaps); now.Sub(r.snaps[n-1].at) >= recentStep {
		r.snaps = append(r.snaps, cur)
	}
	return RecentLatency{Window: now.Sub(from),
		Send: quantiles(cur.send, base.send), Flush: quantiles(cur.flush, base.flush)}
}

// readBuckets sums the cumulative bucket counts of every series of c (a
// histogram or a histogram vector).
func readBuckets(c prometheus.Collector) buckets {
	ch := make(chan prometheus.Metric, 16)
	go func() { c.Collect(ch); close(ch) }()
	var b buckets
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil || pb.Histogram == nil {
			continue
		}
		h := pb.Histogram
		if b.upper == nil {
			b.cum = make([]uint64, len(h.Bucket))
			for _, x := range h.Bucket {
				b.upper = append(b.upper, x.GetUpperBound())
			}
		}
		for i, x := range h.Bucket {
			if i < len(b.cum) {
				b.cum[i] += x.GetCumulativeCount()
			}
		}
		b.count += h.GetSampleCount()
	}
	return b
}

// quantiles estimates p50 and p99 of the observations between base and cur.
func quantiles(cur, base buckets) Quantiles {
	q := Quantiles{Count: cur.count - min(base.count, cur.count)}
	if q.Count == 0 {
		return q
	}
	delta := make([]uint64, len(cur.cum))
	for i := range cur.cum {
		delta[i] = cur.cum[i]
		if i < len(base.cum) {
			delta[i] -= min(base.cum[i], cur.cum[i])
		}
	}
	q.P50 = seconds(bucketQuantile(0.50, cur.upper, delta, q.Count))
	q.P99 = seconds(bucketQuantile(0.99, cur.upper, delta, q.Count))
	return q
}

// bucketQuantile interpolates the phi-quantile within the bucket that holds
// it; past the last finite bound it answers that bound.
func bucketQuantile(phi float64, upper []float64, cum []uint64, total uint64) float64 {
	rank := phi * float64(total)
	lower, below := 0.0, uint64(0)
	for i, ub := range upper {
		if float64(cum[i]) >= rank {
			in := cum[i] - below
			if in == 0 {
				return ub
			}
			return lower + (ub-lower)*(rank-float64(below))/float64(in)
		}
		lower, below = ub, cum[i]
	}
	return lower // in the +Inf bucket
}

func seconds(s float64) time.Duration {
	if math.IsNaN(s) || s < 0 {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// Runtime-info keys of the recent latency (GET_BROKER_RUNTIME_INFO; the
// admin client and the console read them).
const (
	InfoLatencyWindowSeconds = "keelLatencyWindowSeconds"
	InfoSendCount            = "keelSendCount"
	InfoSendP50Millis        = "keelSendLatencyP50Ms"
	InfoSendP99Millis        = "keelSendLatencyP99Ms"
	InfoFlushCount           = "keelFlushCount"
	InfoFlushP50Millis       = "keelFlushLatencyP50Ms"
	InfoFlushP99Millis       = "keelFlushLatencyP99Ms"
)

// RuntimeInfo renders Recent(time.Now()) as broker runtime-info entries
// (milliseconds with three decimals); it is the broker's RuntimeInfo hook.
func (m *Metrics) RuntimeInfo() map[string]string {
	l := m.Recent(time.Now())
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	return map[string]string{
		InfoLatencyWindowSeconds: strconv.FormatInt(int64(l.Window/time.Second), 10),
		InfoSendCount:            strconv.FormatUint(l.Send.Count, 10),
		InfoSendP50Millis:        ms(l.Send.P50),
		InfoSendP99Millis:        ms(l.Send.P99),
		InfoFlushCount:           strconv.FormatUint(l.Flush.Count, 10),
		InfoFlushP50Millis:       ms(l.Flush.P50),
		InfoFlushP99Millis:       ms(l.Flush.P99),
	}
}
