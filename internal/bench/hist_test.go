package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestBucketsAreContiguous(t *testing.T) {
	prevHi := uint64(0)
	for i := 0; i < histBucketsLen; i++ {
		lo, hi := bucketRange(i)
		if i > 0 && lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: bucketOf gives %d, %d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if lo >= linearLimit && float64(hi-lo+1)/float64(lo) > 1.0/subBuckets+1e-12 {
			t.Fatalf("bucket %d [%d,%d] wider than 1/%d of its value", i, lo, hi, subBuckets)
		}
		prevHi = hi
	}
	if prevHi < uint64(MaxLatency) {
		t.Fatalf("last bucket ends at %d, below MaxLatency %d", prevHi, MaxLatency)
	}
}

// TestQuantilePrecision compares the histogram with exact quantiles of the
// same random values over 1 µs .. 60 s.
func TestQuantilePrecision(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	var h Histogram
	vals := make([]time.Duration, 20000)
	for i := range vals {
		// log-uniform between 1 µs and 60 s
		v := time.Duration(math.Exp(rng.Float64()*math.Log(6e10/1e3)) * 1e3)
		vals[i] = v
		h.Record(v)
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 1} {
		rank := int(math.Ceil(q * float64(len(vals))))
		exact := vals[rank-1]
		got := h.Quantile(q)
		if rel := math.Abs(float64(got-exact)) / float64(exact); rel > 0.01 {
			t.Fatalf("seed %d: q%.3f = %v, exact %v (%.2f%% off)", seed, q, got, exact, rel*100)
		}
	}
	if h.Count() != uint64(len(vals)) {
		t.Fatalf("count %d", h.Count())
	}
}

func TestHistogramEdges(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 || h.Max() != 0 {
		t.Fatal("empty histogram must report zeros")
	}
	h.Record(-5)
	h.Record(time.Hour) // clamped
	h.Record(3 * time.Microsecond)
	if got := h.Quantile(0); got != 0 {
		t.Fatalf("min = %v, want 0 (negative clamped)", got)
	}
	if got := h.Max(); math.Abs(float64(got-MaxLatency)) > float64(MaxLatency)/subBuckets {
		t.Fatalf("max = %v, want about %v (clamped)", got, MaxLatency)
	}
	if got := h.Quantile(0.5); got < 2980*time.Nanosecond || got > 3020*time.Nanosecond {
		t.Fatalf("median = %v, want about 3µs", got)
	}
	s := h.Summarize()
	if s.Count != 3 || s.P50 > s.P90 || s.P90 > s.P99 || s.P99 > s.P999 || s.P999 > s.Max {
		t.Fatalf("summary %+v", s)
	}
}

func TestMergeAndSub(t *testing.T) {
	var a, b Histogram
	for i := 1; i <= 100; i++ {
		a.Record(time.Duration(i) * time.Millisecond)
		b.Record(time.Duration(i) * time.Second / 10)
	}
	all := a
	all.Merge(&b)
	if all.Count() != 200 {
		t.Fatalf("merged count %d", all.Count())
	}
	d := all.Sub(&a)
	if d.Count() != 100 || d.Quantile(0.5) != b.Quantile(0.5) || d.Max() != b.Max() || d.Mean() != b.Mean() {
		t.Fatalf("all - a = %+v, want b = %+v", d.Summarize(), b.Summarize())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Sub of a later histogram must panic")
		}
	}()
	a.Sub(&all)
}

func TestRecorderConcurrent(t *testing.T) {
	var r Recorder
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				r.Record(time.Duration(g*1000+i) * time.Microsecond)
			}
		}()
	}
	mid := r.Snapshot() // concurrent with the writers: must be self-consistent
	wg.Wait()
	end := r.Snapshot()
	if end.Count() != 8000 {
		t.Fatalf("count %d", end.Count())
	}
	d := end.Sub(mid)
	if d.Count()+mid.Count() != 8000 {
		t.Fatalf("interval %d + earlier %d != 8000", d.Count(), mid.Count())
	}
	if p := end.Quantile(0.5); p < 3950*time.Microsecond || p > 4050*time.Microsecond {
		t.Fatalf("median %v, want about 4ms", p)
	}
}
