package config

import (
	"strings"
	"time"
)

// AMQPConsumerTimeoutOrNever is the AMQP front door's consumer timeout:
// amqpConsumerTimeoutMillis, negative (never) for 0.
func (b *Broker) AMQPConsumerTimeoutOrNever() time.Duration {
	if b.AMQPConsumerTimeout == 0 {
		return -1
	}
	return b.AMQPConsumerTimeout
}

// AMQP message size limits: RabbitMQ's default and ceiling of
// max_message_size.
const (
	DefaultAMQPMaxMessageBytes = 128 << 20
	MaxAMQPMaxMessageBytes     = 512 << 20
)

// amqpRecordRoom is the largest AMQP body a CommitLog segment takes: a
// record put whole may fill half a segment, less the header room.
func (b *Broker) amqpRecordRoom() int64 {
	return b.CommitLogSegmentBytes/2 - RecordOverheadBytes
}

// AMQPMaxMessage is the AMQP door's body limit: amqpMaxMessageSize; left
// at its default (128 MiB, RabbitMQ's), it is lowered to what a CommitLog
// segment holds (half a segment less 64 KiB) when that is less.
func (b *Broker) AMQPMaxMessage() int {
	if _, set := b.origin["amqpMaxMessageSize"]; set {
		return b.AMQPMaxMessageBytes
	}
	return int(max(min(int64(b.AMQPMaxMessageBytes), b.amqpRecordRoom()), 1))
}

// validateAMQP checks amqpMaxMessageSize; a value set explicitly must
// fit in a segment.
func (b *Broker) validateAMQP(bad func(string, string, ...any)) {
	_, set := b.origin["amqpMaxMessageSize"]
	switch n := b.AMQPMaxMessageBytes; {
	case n < 1 || n > MaxAMQPMaxMessageBytes:
		bad("amqpMaxMessageSize", "must be between 1 and %d (512 MiB)", MaxAMQPMaxMessageBytes)
	case set && int64(n) > b.amqpRecordRoom():
		bad("amqpMaxMessageSize", "%d does not fit in a CommitLog segment: at most half of mapedFileSizeCommitLog less %d (%d)", n, RecordOverheadBytes, b.amqpRecordRoom())
	}
}

// AMQPVhostList returns amqpVhosts as a list (empty entries dropped).
func (b *Broker) AMQPVhostList() []string {
	var out []string
	for _, v := range strings.Split(b.AMQPVhosts, ";") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
