package record

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Envelope layout (see the package documentation).
const (
	offMessages   = 8
	offFlags      = 12
	offDestCount  = 14
	offBodyLen    = 16
	offStoreTs    = 20
	offPhysOffset = 28
	// HeaderBytes is the envelope's fixed part.
	HeaderBytes = 36
	// destFixedBytes is a destination without its topic.
	destFixedBytes = 1 + 4 + 8 + 8
	// MaxDests bounds the ConsumeQueue entries of one record.
	MaxDests = 1024
	// MaxTopicBytes bounds a destination topic (TOPICLEN is an int8).
	MaxTopicBytes = 127
)

// FlagEntryPerMessage (FLAGS bit 0) says that each destination reserves
// MESSAGES consecutive queue offsets from its QUEUEOFFSET, one
// ConsumeQueue entry per logical message, all locating the record (a
// Kafka batch of n records gets n entries). Without it a destination gets
// one entry whatever MESSAGES says (records written before the flag).
const FlagEntryPerMessage uint16 = 1

// knownFlags are the FLAGS bits this release reads.
const knownFlags = FlagEntryPerMessage

// Dest is one destination of an enveloped record: its ConsumeQueue
// entries (one, or MESSAGES with FlagEntryPerMessage).
type Dest struct {
	Topic       string
	QueueID     int32
	QueueOffset int64 // set by the store at append
	TagsCode    int64
}

// AppendEnvelope appends a record of type t (which must be Enveloped)
// holding messages logical messages, routed to dests, with body. The store
// sets STORETIMESTAMP, PHYSICALOFFSET and the queue offsets at append.
func AppendEnvelope(dst []byte, t Type, messages int32, dests []Dest, body []byte) ([]byte, error) {
	return AppendEnvelopeFlags(dst, t, 0, messages, dests, body)
}

// AppendEnvelopeFlags is AppendEnvelope with FLAGS; FlagEntryPerMessage
// needs at least one message.
func AppendEnvelopeFlags(dst []byte, t Type, flags uint16, messages int32, dests []Dest, body []byte) ([]byte, error) {
	if flags&^knownFlags != 0 || flags&FlagEntryPerMessage != 0 && messages < 1 {
		return dst, fmt.Errorf("record: FLAGS %#x with %d messages", flags, messages)
	}
	if !t.Enveloped() {
		return dst, fmt.Errorf("record: %v records do not use the envelope", t)
	}
	if len(dests) > MaxDests || messages < 0 {
		return dst, fmt.Errorf("record: %d destinations (limit %d), %d messages", len(dests), MaxDests, messages)
	}
	size := HeaderBytes + len(body)
	for _, d := range dests {
		if len(d.Topic) == 0 || len(d.Topic) > MaxTopicBytes || d.QueueID < 0 {
			return dst, fmt.Errorf("record: destination topic of %d bytes (1..%d), queue %d", len(d.Topic), MaxTopicBytes, d.QueueID)
		}
		size += destFixedBytes + len(d.Topic)
	}
	if size > math.MaxInt32 {
		return dst, fmt.Errorf("record: envelope of %d bytes", size)
	}
	be := binary.BigEndian
	dst = be.AppendUint32(dst, uint32(size))
	dst = be.AppendUint32(dst, uint32(t.Magic()))
	dst = be.AppendUint32(dst, uint32(messages))
	dst = be.AppendUint16(dst, flags)
	dst = be.AppendUint16(dst, uint16(len(dests)))
	dst = be.AppendUint32(dst, uint32(len(body)))
	dst = be.AppendUint64(dst, 0) // STORETIMESTAMP
	dst = be.AppendUint64(dst, 0) // PHYSICALOFFSET
	for _, d := range dests {
		dst = append(dst, byte(len(d.Topic)))
		dst = append(dst, d.Topic...)
		dst = be.AppendUint32(dst, uint32(d.QueueID))
		dst = be.AppendUint64(dst, uint64(d.QueueOffset))
		dst = be.AppendUint64(dst, uint64(d.TagsCode))
	}
	return append(dst, body...), nil
}

// Envelope is a view of an enveloped record. Use its accessors only after
// CheckEnvelope accepted it.
type Envelope []byte

// CheckEnvelope validates the structure of an enveloped record: its size,
// a known enveloped type, the destinations and the body length.
func CheckEnvelope(rec []byte) error {
	if len(rec) < HeaderBytes {
		return fmt.Errorf("%w: %d bytes, the envelope header is %d", ErrCorrupt, len(rec), HeaderBytes)
	}
	e := Envelope(rec)
	if n := int64(int32(binary.BigEndian.Uint32(rec))); n != int64(len(rec)) {
		return fmt.Errorf("%w: TOTALSIZE %d, record is %d bytes", ErrCorrupt, n, len(rec))
	}
	magic := int32(binary.BigEndian.Uint32(rec[4:]))
	if t := TypeOfMagic(magic); !t.Enveloped() {
		if t == Unknown {
			return UnknownMagicError(magic)
		}
		return fmt.Errorf("%w: a %v is not enveloped", ErrCorrupt, t)
	}
	if f := e.Flags(); e.Messages() < 0 || f&^knownFlags != 0 || f&FlagEntryPerMessage != 0 && e.Messages() < 1 {
		return fmt.Errorf("%w: MESSAGES %d, FLAGS %#x", ErrCorrupt, e.Messages(), f)
	}
	n := e.DestCount()
	if e.Type() == System && (n != 0 || e.Messages() != 0) {
		return fmt.Errorf("%w: a system record with %d destinations, %d messages (it has none)", ErrCorrupt, n, e.Messages())
	}
	if n > MaxDests {
		return fmt.Errorf("%w: DESTCOUNT %d above %d", ErrCorrupt, n, MaxDests)
	}
	off := HeaderBytes
	for i := range n {
		if off+1 > len(rec) {
			return fmt.Errorf("%w: destination %d at %d past the end", ErrCorrupt, i, off)
		}
		t := int(int8(rec[off]))
		if t < 1 || off+destFixedBytes+t > len(rec) {
			return fmt.Errorf("%w: destination %d: TOPICLEN %d at %d, record is %d bytes", ErrCorrupt, i, t, off, len(rec))
		}
		if qid := int32(binary.BigEndian.Uint32(rec[off+1+t:])); qid < 0 {
			return fmt.Errorf("%w: destination %d: queue id %d", ErrCorrupt, i, qid)
		}
		off += destFixedBytes + t
	}
	if body := int64(int32(binary.BigEndian.Uint32(rec[offBodyLen:]))); body != int64(len(rec)-off) {
		return fmt.Errorf("%w: BODYLEN %d, %d bytes follow the destinations", ErrCorrupt, body, len(rec)-off)
	}
	return nil
}

// Type returns the record's type.
func (e Envelope) Type() Type { return TypeOfMagic(int32(binary.BigEndian.Uint32(e[4:]))) }

// Messages returns how many logical messages the record holds.
func (e Envelope) Messages() int32 { return int32(binary.BigEndian.Uint32(e[offMessages:])) }

// Flags returns FLAGS.
func (e Envelope) Flags() uint16 { return binary.BigEndian.Uint16(e[offFlags:]) }

// Entries returns how many consecutive queue offsets (ConsumeQueue
// entries) each destination has: MESSAGES with FlagEntryPerMessage, else 1.
func (e Envelope) Entries() int64 {
	if e.Flags()&FlagEntryPerMessage != 0 {
		return int64(e.Messages())
	}
	return 1
}

// DestCount returns the number of destinations.
func (e Envelope) DestCount() int { return int(binary.BigEndian.Uint16(e[offDestCount:])) }

// StoreTimestamp returns the store time (ms).
func (e Envelope) StoreTimestamp() int64 { return int64(binary.BigEndian.Uint64(e[offStoreTs:])) }

// PhysOffset returns the CommitLog offset the record says it is at.
func (e Envelope) PhysOffset() int64 { return int64(binary.BigEndian.Uint64(e[offPhysOffset:])) }

// Body returns the type's payload (aliasing e).
func (e Envelope) Body() []byte {
	n := int(binary.BigEndian.Uint32(e[offBodyLen:]))
	return e[len(e)-n:]
}

// EachDest calls fn for every destination in order, with the position of
// its QUEUEOFFSET field (for PatchQueueOffset); topic aliases e. It stops
// at the first error fn returns.
func (e Envelope) EachDest(fn func(i int, topic []byte, queueID int32, queueOffset, tagsCode int64, patchAt int) error) error {
	off := HeaderBytes
	be := binary.BigEndian
	for i := range e.DestCount() {
		t := int(e[off])
		topic := e[off+1 : off+1+t]
		p := off + 1 + t
		if err := fn(i, topic, int32(be.Uint32(e[p:])), int64(be.Uint64(e[p+4:])), int64(be.Uint64(e[p+12:])), p+4); err != nil {
			return err
		}
		off = p + 20
	}
	return nil
}

// Patch sets STORETIMESTAMP and PHYSICALOFFSET in place.
func (e Envelope) Patch(physOffset, storeTimestamp int64) {
	binary.BigEndian.PutUint64(e[offStoreTs:], uint64(storeTimestamp))
	binary.BigEndian.PutUint64(e[offPhysOffset:], uint64(physOffset))
}

// PatchQueueOffset sets the QUEUEOFFSET field at position at (from
// EachDest) in place.
func (e Envelope) PatchQueueOffset(at int, queueOffset int64) {
	binary.BigEndian.PutUint64(e[at:], uint64(queueOffset))
}
