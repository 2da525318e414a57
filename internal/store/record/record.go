// Package record defines the types of CommitLog records: what a record
// says it is, and the envelope every type but the RocketMQ message uses.
//
// # Record types
//
// Every CommitLog record starts with TOTALSIZE (int32, the record's length)
// and MAGICCODE (int32); the magic says which type the record is:
//
//	type        magic        layout
//	RocketMQ    0xDAA320A7   RocketMQ's stored message, V1 (package message)
//	KafkaBatch  0xDAA34B42   envelope; body: a Kafka record batch as received
//	AMQP        0xDAA3414D   envelope; body: an AMQP message
//	System      0xDAA35359   envelope, no destinations; body: a system record
//	                         (broker metadata that travels with the log; system.go)
//
// (0xCBD43194 is the CommitLog's blank marker, not a record.) The RocketMQ
// magic is RocketMQ's own, so data written before types existed is a log
// of RocketMQ records as it stands: no migration. The other magics share
// its first two bytes, which keeps the recovery scan's quick look for a
// record start (see package commitlog) the same. Any other magic is not a
// record this version knows: a reader that meets one fails with an error
// wrapping ErrUnknownType naming it, never skips it (a record written by a
// newer release must not be mistaken for a torn tail and cut).
//
// The CommitLog appends a CRC32-C of the whole record after it, whatever
// its type.
//
// # Envelope
//
// Records other than RocketMQ messages share one envelope (big-endian):
//
//	off   size  field
//	  0      4  TOTALSIZE       whole record length
//	  4      4  MAGICCODE       the type
//	  8      4  MESSAGES        logical messages in the record (>= 0)
//	 12      2  FLAGS           bit 0 FlagEntryPerMessage; the others 0 (reserved)
//	 14      2  DESTCOUNT       D, destinations (queues) of the record (<= MaxDests)
//	 16      4  BODYLEN         B
//	 20      8  STORETIMESTAMP  ms, set by the store at append
//	 28      8  PHYSICALOFFSET  CommitLog offset of this record, set at append
//	 36      .  D destinations, each:
//	               1  TOPICLEN     T, 1..127
//	               T  TOPIC
//	               4  QUEUEID
//	               8  QUEUEOFFSET  set by the store at append
//	               8  TAGSCODE     the ConsumeQueue entry's tag code
//	  .      B  BODY            the type's payload, opaque to the store
//
// PHYSICALOFFSET is at offset 28, as in a RocketMQ record, so recovery
// reads a record's own offset the same way for every type.
//
// A record is stored once whatever its destinations (an AMQP message
// routed to several queues). With FlagEntryPerMessage a destination gets
// one ConsumeQueue entry per logical message: a record holding n logical
// messages (MESSAGES, a Kafka batch of n records) has n entries in each
// of its queues, at queue offsets QUEUEOFFSET..QUEUEOFFSET+n-1, all
// locating it; entry QUEUEOFFSET+i stands for its message i. Without the
// flag (records of earlier releases) a destination has one entry standing
// for all MESSAGES.
//
// Decoders (TypeOf, CheckEnvelope, the Envelope accessors after a
// successful CheckEnvelope) never panic on any input.
package record

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/keelmq/keel/internal/message"
)

// Type is what a CommitLog record is.
type Type uint8

// The record types.
const (
	Unknown Type = iota
	RocketMQ
	KafkaBatch
	AMQP
	System
)

// Magic codes of the types (MAGICCODE, offset 4).
const (
	MagicRocketMQ   = message.MagicV1
	MagicKafkaBatch = int32(-626832574) // 0xDAA34B42
	MagicAMQP       = int32(-626835123) // 0xDAA3414D
	MagicSystem     = int32(-626830503) // 0xDAA35359
)

// ErrUnknownType is wrapped by errors about a record whose magic is no
// type this version knows.
var ErrUnknownType = errors.New("record: unknown record type")

// ErrCorrupt is wrapped by errors about an envelope that does not parse.
var ErrCorrupt = errors.New("record: corrupt envelope")

func (t Type) String() string {
	switch t {
	case RocketMQ:
		return "RocketMQ message"
	case KafkaBatch:
		return "Kafka record batch"
	case AMQP:
		return "AMQP message"
	case System:
		return "system record"
	}
	return "unknown"
}

// Magic returns the magic code of t (0 for Unknown).
func (t Type) Magic() int32 {
	switch t {
	case RocketMQ:
		return MagicRocketMQ
	case KafkaBatch:
		return MagicKafkaBatch
	case AMQP:
		return MagicAMQP
	case System:
		return MagicSystem
	}
	return 0
}

// Enveloped reports whether records of t use the envelope.
func (t Type) Enveloped() bool { return t == KafkaBatch || t == AMQP || t == System }

// TypeOfMagic returns the type a magic code names, or Unknown.
func TypeOfMagic(magic int32) Type {
	switch magic {
	case MagicRocketMQ:
		return RocketMQ
	case MagicKafkaBatch:
		return KafkaBatch
	case MagicAMQP:
		return AMQP
	case MagicSystem:
		return System
	}
	return Unknown
}

// TypeOf returns the type of rec from its magic, or an error wrapping
// ErrUnknownType (or for fewer than 8 bytes ErrCorrupt).
func TypeOf(rec []byte) (Type, error) {
	if len(rec) < 8 {
		return Unknown, fmt.Errorf("%w: %d bytes, shorter than a record header", ErrCorrupt, len(rec))
	}
	magic := int32(binary.BigEndian.Uint32(rec[4:8]))
	if t := TypeOfMagic(magic); t != Unknown {
		return t, nil
	}
	return Unknown, UnknownMagicError(magic)
}

// UnknownMagicError is the error for a record with an unknown magic.
func UnknownMagicError(magic int32) error {
	return fmt.Errorf("%w: magic %#08x (written by a newer release of Keel? this one cannot read it)", ErrUnknownType, uint32(magic))
}
