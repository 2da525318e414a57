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
//	GROUP 2 | PHYS 6 | GROUP 1 | INDEX 3 | 'K' 'E' 'G' KIND 1
//
// PHYS is the record's CommitLog offset (below 2^48), INDEX the message's
// index in the record (a Kafka batch holds several; below 2^24), KIND the
// record type (ConvertedKafka, ConvertedAMQP), and GROUP a 24-bit tag of
// the broker group that stores it (GroupTag of its brokerName), so that
// records at one CommitLog offset of two groups of a cluster have
// different ids. Without a tag (earlier releases, and an offset or index
// too large for those fields) the form is
//
//	PHYS 8 | INDEX 4 | 'K' 'E' 'L' KIND 1
//
// It is the same on every member of a broker group (one CommitLog, one
// brokerName), and a broker resolves it without its index.
type ConvertedID struct {
	PhysOffset int64
	Index      int32
	Kind       byte
	Group      uint32 // GroupTag of the storing group; 0: none
}

// Kinds of ConvertedID.
const (
	ConvertedKafka byte = 'K'
	ConvertedAMQP  byte = 'A'
)

// ConvertedIDLen is the length of a ConvertedID in hex characters.
const ConvertedIDLen = 32

const (
	convertedPhysBits  = 48
	convertedIndexBits = 24
)

// GroupTag is the 24-bit tag of broker group name in ConvertedIDs (FNV-1a
// folded; never 0).
func GroupTag(name string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h ^= uint32(name[i])
		h *= 16777619
	}
	if t := (h >> 24) ^ (h & 0xffffff); t != 0 {
		return t
	}
	return 1
}

// Append appends the id's text to dst.
func (id ConvertedID) Append(dst []byte) []byte {
	var b [16]byte
	phys, index, group := uint64(id.PhysOffset), uint32(id.Index), id.Group&0xffffff
	b[12], b[13], b[14], b[15] = 'K', 'E', 'L', id.Kind
	if group != 0 && phys>>convertedPhysBits == 0 && index>>convertedIndexBits == 0 {
		phys |= uint64(group>>8) << convertedPhysBits
		index |= (group & 0xff) << convertedIndexBits
		b[14] = 'G'
	}
	binary.BigEndian.PutUint64(b[0:], phys)
	binary.BigEndian.PutUint32(b[8:], index)
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
	phys, index := binary.BigEndian.Uint64(b[0:]), binary.BigEndian.Uint32(b[8:])
	id := ConvertedID{PhysOffset: int64(phys), Index: int32(index), Kind: b[15]}
	if b[12] != 'K' || b[13] != 'E' || b[14] != 'L' && b[14] != 'G' || id.Kind != ConvertedKafka && id.Kind != ConvertedAMQP {
		return ConvertedID{}, false
	}
	if b[14] == 'G' {
		id.PhysOffset, id.Index = int64(phys&(1<<convertedPhysBits-1)), int32(index&(1<<convertedIndexBits-1))
		if id.Group = uint32(phys>>convertedPhysBits)<<8 | index>>convertedIndexBits; id.Group == 0 {
			return ConvertedID{}, false
		}
	} else if id.PhysOffset < 0 || id.Index < 0 {
		return ConvertedID{}, false
	}
	return id, true
}
