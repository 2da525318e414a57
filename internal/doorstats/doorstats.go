// Package doorstats holds the traffic counters every front door keeps for
// its listener: connections accepted and open, requests, errors and bytes
// in each direction. A door adds to its Counters on its connections'
// goroutines (atomics: one add per frame or connection); the metrics read a
// Snapshot at scrape time, labelled by the door's name. Standard library
// only, so that the protocol layers can use it without knowing the metrics.
package doorstats

import "sync/atomic"

// Door names, the values of the metrics' door label.
const (
	RocketMQ = "rocketmq"
	Kafka    = "kafka"
	AMQP     = "amqp"
)

// Counters are one listener's traffic counters. The zero value is ready;
// a nil *Counters ignores every call, so a door built without one (tests)
// needs no check.
type Counters struct {
	accepted atomic.Int64
	closed   atomic.Int64
	requests atomic.Int64
	errors   atomic.Int64
	bytesIn  atomic.Int64
	bytesOut atomic.Int64
}

// Snapshot is a copy of the counters at one moment.
type Snapshot struct {
	Door string
	// Open is the connections open now (accepted minus closed).
	Open int64
	// Accepted counts connections accepted (also those refused at once
	// afterwards, which count as closed).
	Accepted int64
	// Requests counts the requests read (frames, AMQP methods).
	Requests int64
	// Errors counts requests answered with an error and connections closed
	// for an error (a malformed or refused frame, a failed authentication;
	// the RocketMQ door also a failed write).
	Errors int64
	// BytesIn and BytesOut count the bytes read from and written to the
	// door's connections.
	BytesIn, BytesOut int64
}

// Accept counts a connection accepted.
func (c *Counters) Accept() {
	if c != nil {
		c.accepted.Add(1)
	}
}

// Close counts a connection closed (once per accepted connection).
func (c *Counters) Close() {
	if c != nil {
		c.closed.Add(1)
	}
}

// Request counts one request read.
func (c *Counters) Request() {
	if c != nil {
		c.requests.Add(1)
	}
}

// Error counts one failed request or connection.
func (c *Counters) Error() {
	if c != nil {
		c.errors.Add(1)
	}
}

// In counts n bytes read.
func (c *Counters) In(n int) {
	if c != nil && n > 0 {
		c.bytesIn.Add(int64(n))
	}
}

// Out counts n bytes written.
func (c *Counters) Out(n int) {
	if c != nil && n > 0 {
		c.bytesOut.Add(int64(n))
	}
}

// Snapshot reads the counters under the name door (zero for nil).
func (c *Counters) Snapshot(door string) Snapshot {
	s := Snapshot{Door: door}
	if c == nil {
		return s
	}
	// Closed before accepted: Open is never negative.
	closed := c.closed.Load()
	s.Accepted = c.accepted.Load()
	s.Open = max(s.Accepted-closed, 0)
	s.Requests, s.Errors = c.requests.Load(), c.errors.Load()
	s.BytesIn, s.BytesOut = c.bytesIn.Load(), c.bytesOut.Load()
	return s
}
