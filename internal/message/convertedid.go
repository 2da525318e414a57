package message

import (
	"encoding/binary"
	"encoding/hex"
)

// ConvertedID is the message id (UNIQ_KEY) a message converted from a
// record of another protocol carries for a RocketMQ reader: a Kafka
// record of a batch, an AMQP message. Such records have no id of their
// own, so the id names where the message is: 32 upper-case hex digits,
// as RocketMQ's, of
//
//	PHYS 8 | INDEX 4 | 'K' 'E' 'L' KIND 1
//
// PHYS is the record's CommitLog offset, INDEX the message's index in the
// record (a Kafka batch holds several), KIND the record type (ConvertedKafka,
// ConvertedAMQP). It is the same on every member of a broker group (one
// CommitLog), and a broker resolves it without its index.
type ConvertedID struct {
	PhysOffset int64
	Index      int32
	Kind       byte
}

// Kinds of ConvertedID.
const (
	ConvertedKafka byte = 'K'
	ConvertedAMQP  byte = 'A'
)

// ConvertedIDLen is the length of a ConvertedID in hex characters.
const ConvertedIDLen = 32

// Append appends the id's text to dst.
func (id ConvertedID) Append(dst []byte) []byte {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:], uint64(id.PhysOffset))
	binary.BigEndian.PutUint32(b[8:], uint32(id.Index))
	b[12], b[13], b[14], b[15] = 'K', 'E', 'L', id.Kind
	return appendUpperHex(dst, b[:])
}

func (id ConvertedID) String() string { return string(id.Append(make([]byte, 0, ConvertedIDLen))) }

// ParseConvertedID reverses Append (either case); false if s is not such
// an id (of a known kind, a valid offset and index).
func ParseConvertedID(s string) (ConvertedID, bool) {
	var b [16]byte
	if len(s) != ConvertedIDLen {
		return ConvertedID{}, false
	}
	if _, err := hex.Decode(b[:], []byte(s)); err != nil {
		return ConvertedID{}, false
	}
	id := ConvertedID{PhysOffset: int64(binary.BigEndian.Uint64(b[0:])), Index: int32(binary.BigEndian.Uint32(b[8:])), Kind: b[15]}
	if b[12] != 'K' || b[13] != 'E' || b[14] != 'L' || id.PhysOffset < 0 || id.Index < 0 ||
		id.Kind != ConvertedKafka && id.Kind != ConvertedAMQP {
		return ConvertedID{}, false
	}
	return id, true
}
