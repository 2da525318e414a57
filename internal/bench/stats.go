package bench

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// stats are the counters every producer and consumer goroutine adds to.
// All fields are safe for concurrent use.
type stats struct {
	sent, sentBytes     atomic.Uint64 // acknowledged messages and payload bytes
	sendErrors          atomic.Uint64 // failed requests (a batch counts once)
	received, recvBytes atomic.Uint64 // pulled messages and payload bytes
	recvErrors          atomic.Uint64 // failed pulls, corrupt records
	outOfOrder          atomic.Uint64 // a record's queue offset was not the next expected one
	sendLat, e2eLat     Recorder

	errMu sync.Mutex
	errs  map[string]uint64 // guarded by errMu: count per error kind
}

// maxErrorKinds bounds the error table; further kinds are counted as "other".
const maxErrorKinds = 32

func newStats() *stats { return &stats{errs: make(map[string]uint64)} }

// countError adds one to the error kind (e.g. "send: code 10").
func (s *stats) countError(kind string) {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	if _, ok := s.errs[kind]; !ok && len(s.errs) >= maxErrorKinds {
		kind = "other"
	}
	s.errs[kind]++
}

func (s *stats) errorTable() map[string]uint64 {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return maps.Clone(s.errs)
}

// snapshot is the cumulative state at one moment.
type snapshot struct {
	at                              time.Time
	sent, sentBytes, sendErrors     uint64
	received, recvBytes, recvErrors uint64
	sendLat, e2eLat                 *Histogram
}

func (s *stats) snapshot() snapshot {
	return snapshot{
		at:   time.Now(),
		sent: s.sent.Load(), sentBytes: s.sentBytes.Load(), sendErrors: s.sendErrors.Load(),
		received: s.received.Load(), recvBytes: s.recvBytes.Load(), recvErrors: s.recvErrors.Load(),
		sendLat: s.sendLat.Snapshot(), e2eLat: s.e2eLat.Snapshot(),
	}
}

// Throughput is what one side (send or receive) did in a time window.
type Throughput struct {
	Messages   uint64  `json:"messages"`
	Bytes      uint64  `json:"bytes"` // payload bytes
	Seconds    float64 `json:"seconds"`
	MsgsPerSec float64 `json:"msgs_per_sec"`
	MBPerSec   float64 `json:"mb_per_sec"` // 10^6 payload bytes per second
	Errors     uint64  `json:"errors"`
	// Latency: send latency (request to response) for the send side,
	// end-to-end latency (send timestamp in the body to receipt) for the
	// receive side.
	Latency Summary `json:"latency"`
}

func throughput(msgs, bytes, errs uint64, lat *Histogram, d time.Duration) Throughput {
	t := Throughput{Messages: msgs, Bytes: bytes, Seconds: d.Seconds(), Errors: errs, Latency: lat.Summarize()}
	if d > 0 {
		t.MsgsPerSec = float64(msgs) / d.Seconds()
		t.MBPerSec = float64(bytes) / d.Seconds() / 1e6
	}
	return t
}

// window returns the send and receive throughput between two snapshots.
func window(a, b snapshot) (send, recv Throughput) {
	d := b.at.Sub(a.at)
	send = throughput(b.sent-a.sent, b.sentBytes-a.sentBytes, b.sendErrors-a.sendErrors, b.sendLat.Sub(a.sendLat), d)
	recv = throughput(b.received-a.received, b.recvBytes-a.recvBytes, b.recvErrors-a.recvErrors, b.e2eLat.Sub(a.e2eLat), d)
	return send, recv
}

// progressLine formats one progress report.
func progressLine(elapsed time.Duration, phase string, send, recv Throughput, sending, receiving bool) string {
	line := fmt.Sprintf("[%6.1fs] %-8s", elapsed.Seconds(), phase)
	if sending {
		line += fmt.Sprintf(" send %9.0f msg/s %8.1f MB/s p50 %8s p99 %8s err %d",
			send.MsgsPerSec, send.MBPerSec, fmtDur(send.Latency.P50), fmtDur(send.Latency.P99), send.Errors)
	}
	if receiving {
		line += fmt.Sprintf(" | recv %9.0f msg/s %8.1f MB/s e2e p50 %8s p99 %8s err %d",
			recv.MsgsPerSec, recv.MBPerSec, fmtDur(recv.Latency.P50), fmtDur(recv.Latency.P99), recv.Errors)
	}
	return line
}

// fmtDur prints a latency with three significant digits.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Microsecond:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	case d < time.Millisecond:
		return fmt.Sprintf("%.3gµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.3gms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.3gs", d.Seconds())
	}
}

// sortedKinds returns the keys of an error table in order.
func sortedKinds(m map[string]uint64) []string { return slices.Sorted(maps.Keys(m)) }
