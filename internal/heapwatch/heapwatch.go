// Package heapwatch measures the heap for the hostile-input tests: the
// largest heap a run reached, sampled every millisecond, and the heap now.
// It is for _test.go files only (internal/archtest says so) and imports
// only the standard library.
//
// The figure is the runtime's /memory/classes/heap/objects:bytes: the bytes
// of live objects and of dead ones not yet swept, which is what a request's
// allocations raise. The collector lets it reach about twice what was live
// at the last collection (GOGC=100), which is why the tests' bounds are
// twice what may be live.
package heapwatch

import (
	"runtime"
	"runtime/metrics"
	"time"
)

const objectsMetric = "/memory/classes/heap/objects:bytes"

// Objects is the heap's object bytes now (live and not yet swept).
func Objects() uint64 {
	s := []metrics.Sample{{Name: objectsMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// Now is the heap's object bytes after a collection: what is live.
func Now() uint64 {
	runtime.GC()
	return Objects()
}

// Watch samples Objects every millisecond until stop, which returns the
// largest sample.
func Watch() (stop func() uint64) {
	done, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var top uint64
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			top = max(top, Objects())
			select {
			case <-done:
				peak <- top
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 { close(done); return <-peak }
}
