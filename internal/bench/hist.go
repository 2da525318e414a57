package bench

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// Latency histogram: log-linear buckets in nanoseconds, in the manner of
// HdrHistogram. Values below 256 ns have a bucket each; above, every power
// of two is split into 128 equal sub-buckets, so a bucket is at most 1/128
// of its lower bound wide and a reported value (the bucket's midpoint) is
// within 0.4 % of every value recorded in it. Values are clamped to
// [0, MaxLatency]; 1 µs .. 60 s is covered with that precision.
const (
	// MaxLatency is the largest value a histogram tells apart; larger
	// values are recorded as MaxLatency.
	MaxLatency = 60 * time.Second

	subBucketBits  = 7
	subBuckets     = 1 << subBucketBits // 128 per power of two
	linearLimit    = 2 * subBuckets     // values below have a bucket each
	histBucketsLen = (bitsOfMax-subBucketBits-1)*subBuckets + linearLimit
	bitsOfMax      = 36 // bits.Len64(uint64(MaxLatency))
)

func init() {
	if bits.Len64(uint64(MaxLatency)) != bitsOfMax {
		panic("bench: bitsOfMax does not match MaxLatency")
	}
}

// bucketOf returns the bucket index of v (already clamped).
func bucketOf(v uint64) int {
	if v < linearLimit {
		return int(v)
	}
	shift := bits.Len64(v) - subBucketBits - 1 // >= 1
	return shift*subBuckets + int(v>>shift)
}

// bucketRange returns the smallest and largest value of bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < linearLimit {
		return uint64(i), uint64(i)
	}
	shift := i/subBuckets - 1
	sub := uint64(i%subBuckets + subBuckets)
	return sub << shift, (sub+1)<<shift - 1
}

func clampLatency(d time.Duration) uint64 {
	if d < 0 {
		return 0
	}
	if d > MaxLatency {
		d = MaxLatency
	}
	return uint64(d)
}

// Histogram is a latency histogram. The zero value is empty and ready;
// it is not safe for concurrent use (see Recorder).
type Histogram struct {
	counts [histBucketsLen]uint64
	total  uint64
	sum    uint64 // ns, for the mean
}

// Record adds one value.
func (h *Histogram) Record(d time.Duration) {
	v := clampLatency(d)
	h.counts[bucketOf(v)]++
	h.total++
	h.sum += v
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.total }

// Mean is the mean of the recorded values (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.total == 0 {
		return 0
	}
	return time.Duration(h.sum / h.total)
}

// Quantile returns the value at quantile q in [0, 1]: the representative
// (midpoint) of the bucket holding the ceil(q*count)-th smallest value.
// It returns 0 when the histogram is empty.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := uint64(q*float64(h.total) + 0.999999) // ceil, robust to rounding
	rank = min(max(rank, 1), h.total)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i]
		if seen >= rank {
			lo, hi := bucketRange(i)
			return time.Duration(lo + (hi-lo)/2)
		}
	}
	panic("bench: histogram counts do not add up to its total")
}

// Max is the representative of the highest non-empty bucket.
func (h *Histogram) Max() time.Duration { return h.Quantile(1) }

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
}

// Sub returns h minus an earlier snapshot of the same cumulative
// histogram: the values recorded between the two.
func (h *Histogram) Sub(earlier *Histogram) *Histogram {
	d := &Histogram{}
	for i := range h.counts {
		if h.counts[i] < earlier.counts[i] {
			panic("bench: Sub of a histogram that is not an earlier snapshot")
		}
		d.counts[i] = h.counts[i] - earlier.counts[i]
	}
	d.total = h.total - earlier.total
	d.sum = h.sum - earlier.sum
	return d
}

// Summary is the usual set of quantiles.
type Summary struct {
	Count uint64        `json:"count"`
	Mean  time.Duration `json:"mean_ns"`
	P50   time.Duration `json:"p50_ns"`
	P90   time.Duration `json:"p90_ns"`
	P99   time.Duration `json:"p99_ns"`
	P999  time.Duration `json:"p999_ns"`
	Max   time.Duration `json:"max_ns"`
}

// Summarize computes the Summary of h.
func (h *Histogram) Summarize() Summary {
	return Summary{Count: h.total, Mean: h.Mean(), P50: h.Quantile(0.50), P90: h.Quantile(0.90),
		P99: h.Quantile(0.99), P999: h.Quantile(0.999), Max: h.Max()}
}

// Recorder is a cumulative histogram that many goroutines record into
// without locks; Snapshot copies it into a Histogram. Intervals are the
// difference of two snapshots (Histogram.Sub).
type Recorder struct {
	counts [histBucketsLen]atomic.Uint64
	total  atomic.Uint64
	sum    atomic.Uint64
}

// Record adds one value; safe for concurrent use.
func (r *Recorder) Record(d time.Duration) {
	v := clampLatency(d)
	r.counts[bucketOf(v)].Add(1)
	r.sum.Add(v)
	r.total.Add(1)
}

// Snapshot copies the recorder. Concurrent Records may or may not be
// included; the copy is consistent in that total is recomputed from the
// copied buckets.
func (r *Recorder) Snapshot() *Histogram {
	h := &Histogram{}
	for i := range r.counts {
		c := r.counts[i].Load()
		h.counts[i] = c
		h.total += c
	}
	h.sum = r.sum.Load()
	return h
}
