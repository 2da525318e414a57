package message

import "net/netip"

// Magic codes at offset 4 of a record.
const (
	MagicV1    int32 = -626843481 // 0xDAA320A7, 1-byte topic length
	MagicBlank int32 = -875286124 // 0xCBD43194, end-of-segment filler in the CommitLog
)

// Limits of the V1 layout.
const (
	MaxTopicBytes      = 127
	MaxPropertiesBytes = 32767
	MinRecordBytes     = 91 // IPv4/IPv4, empty body, topic and properties
)

// SysFlag bits.
const (
	FlagCompressed   int32 = 0x1
	FlagMultiTags    int32 = 0x2
	FlagTxPrepared   int32 = 0x4
	FlagTxCommit     int32 = 0x8
	FlagTxRollback   int32 = 0xC
	FlagTxMask       int32 = 0xC
	FlagBornHostV6   int32 = 0x10
	FlagStoreHostV6  int32 = 0x20
	FlagNeedUnwrap   int32 = 0x40
	FlagInnerBatch   int32 = 0x80
	FlagCompressMask int32 = 0x700
)

// Message is one message as the broker stores it. QueueOffset, PhysOffset and
// StoreTimestamp are assigned by the store when the message is appended.
type Message struct {
	Topic            string
	QueueID          int32
	Flag             int32
	SysFlag          int32 // host V6 bits are derived from BornHost/StoreHost on encode
	BornTimestamp    int64 // ms
	BornHost         netip.AddrPort
	StoreHost        netip.AddrPort
	ReconsumeTimes   int32
	PreparedTxOffset int64
	Body             []byte
	Properties       string // encoded: name\x01value\x02 ...

	QueueOffset    int64
	PhysOffset     int64
	StoreTimestamp int64 // ms
}
