package record

// System records: the broker metadata that travels with the log.
//
// A system record is an envelope (Type System) with no destinations and
// no logical messages, so no ConsumeQueue indexes it and no consumer sees
// it. Its body says what changed:
//
//	off  size  field
//	  0     1  VERSION   SystemVersion (1)
//	  1     1  KIND      one of the Kind* constants
//	  2     .  PAYLOAD   per kind, below
//
// The CommitLog's CRC32-C trailer covers the whole record, body included,
// so a system record is checksummed like every other. Integers are
// big-endian; a string is u16 length + bytes; a blob is u32 length + bytes.
//
//	KindOffsets       u32 N, N × (group string, topic string, queue i32, offset i64)
//	                  committed consumer offsets (set, coalesced per flush)
//	KindOffsetsDelete group string, topic string, queue i32: remove the
//	                  offsets of the group ("" = every group) on the topic
//	                  ("" = every topic) and queue (-1 = every queue)
//	KindTopicConfig   version (timestamp i64, counter i64), u32 N,
//	KindGroupConfig   N × (name string, config blob): the table's new
//	                  DataVersion and the entries set (config = the entry's
//	                  JSON, as the broker's JSON file holds it) or removed
//	                  (an empty blob)
//	KindDelayProgress u32 N, N × (topic string, queue i32, offset i64): the
//	                  schedule service's cursors
//	KindAMQPQueues    AMQP FORMAT (u8, AMQPFormat), vhost string, u32 N,
//	KindAMQPExchanges N × (name string, definition blob): the AMQP door's
//	                  durable queues (queues.json's entries) or durable
//	                  exchanges with their bindings (exchanges.json's) set
//	                  (the entry's JSON) or removed (an empty blob)
//	KindAMQPAcks      AMQP FORMAT, vhost string, u32 N, N × (store topic
//	                  string, state blob): durable queues' acknowledgement
//	                  state (acks.json's entries, with the delivery lease)
//
// The AMQP kinds carry a format byte of their own, so that their payload
// can change without a new SystemVersion; a format this release does not
// know is ErrUnknownType, as an unknown kind.
//	KindKafkaTxn      blob: a change of the Kafka door's transaction
//	                  coordinator, in the door's own encoding (package
//	                  internal/kafka, txnlog.go); the core passes it
//	                  over, the door reads it back when it starts
//
// A version or kind this release does not know is an error wrapping
// ErrUnknownType (a record written by a newer release: a reader must stop,
// never skip it); a payload that does not parse wraps ErrCorrupt.

import (
	"encoding/binary"
	"fmt"
	"math"
)

// SystemVersion is the version of the system record body this release
// writes and reads.
const SystemVersion = 1

// Kind is what a system record says changed.
type Kind uint8

// The kinds of system record.
const (
	KindOffsets       Kind = 1
	KindOffsetsDelete Kind = 2
	KindTopicConfig   Kind = 3
	KindGroupConfig   Kind = 4
	KindDelayProgress Kind = 5
	KindAMQPQueues    Kind = 6
	KindAMQPExchanges Kind = 7
	KindAMQPAcks      Kind = 8
	KindKafkaTxn      Kind = 9
)

// AMQPFormat is the format of the AMQP kinds' payload this release
// writes and reads.
const AMQPFormat = 1

// IsAMQP reports whether k is one of the AMQP door's kinds.
func (k Kind) IsAMQP() bool { return k >= KindAMQPQueues && k <= KindAMQPAcks }

func (k Kind) String() string {
	switch k {
	case KindOffsets:
		return "offsets"
	case KindOffsetsDelete:
		return "offsets delete"
	case KindTopicConfig:
		return "topic config"
	case KindGroupConfig:
		return "subscription group config"
	case KindDelayProgress:
		return "delay progress"
	case KindAMQPQueues:
		return "AMQP queues"
	case KindAMQPExchanges:
		return "AMQP exchanges"
	case KindAMQPAcks:
		return "AMQP acknowledgement state"
	case KindKafkaTxn:
		return "kafka transaction"
	}
	return fmt.Sprintf("kind %d", uint8(k))
}

// OffsetEntry is one committed offset.
type OffsetEntry struct {
	Group, Topic string
	QueueID      int32
	Offset       int64
}

// ConfigEntry is one entry of a config table: its JSON, or nil for a
// removal.
type ConfigEntry struct {
	Name   string
	Config []byte
}

// QueueCursor is one queue's cursor of the schedule service.
type QueueCursor struct {
	Topic   string
	QueueID int32
	Offset  int64
}

// SystemRecord is a decoded system record body; the fields of its Kind
// are set.
type SystemRecord struct {
	Kind Kind
	// KindOffsets.
	Offsets []OffsetEntry
	// KindOffsetsDelete: "" matches every group or topic, QueueID -1
	// every queue.
	Group, Topic string
	QueueID      int32
	// KindTopicConfig, KindGroupConfig.
	VersionTimestamp, VersionCounter int64
	Configs                          []ConfigEntry
	// KindDelayProgress.
	Cursors []QueueCursor
	// The AMQP kinds: the vhost, and in Configs the entries (queue or
	// exchange name, or store topic, with its JSON; nil: removed).
	Vhost string
	// KindKafkaTxn: the door's encoding of the change.
	Payload []byte
}

// MaxSystemStringBytes bounds a string of a system record.
const MaxSystemStringBytes = math.MaxUint16

// AppendSystem appends the body of r to dst.
func AppendSystem(dst []byte, r *SystemRecord) ([]byte, error) {
	e := sysEnc{b: append(dst, SystemVersion, byte(r.Kind))}
	switch r.Kind {
	case KindOffsets:
		e.u32(uint32(len(r.Offsets)))
		for _, o := range r.Offsets {
			e.str(o.Group)
			e.str(o.Topic)
			e.u32(uint32(o.QueueID))
			e.u64(uint64(o.Offset))
		}
	case KindOffsetsDelete:
		e.str(r.Group)
		e.str(r.Topic)
		e.u32(uint32(r.QueueID))
	case KindTopicConfig, KindGroupConfig:
		e.u64(uint64(r.VersionTimestamp))
		e.u64(uint64(r.VersionCounter))
		e.entries(r.Configs)
	case KindDelayProgress:
		e.u32(uint32(len(r.Cursors)))
		for _, c := range r.Cursors {
			e.str(c.Topic)
			e.u32(uint32(c.QueueID))
			e.u64(uint64(c.Offset))
		}
	case KindAMQPQueues, KindAMQPExchanges, KindAMQPAcks:
		e.b = append(e.b, AMQPFormat)
		e.str(r.Vhost)
		e.entries(r.Configs)
	case KindKafkaTxn:
		e.u32(uint32(len(r.Payload)))
		e.b = append(e.b, r.Payload...)
	default:
		return dst, fmt.Errorf("record: cannot encode a system record of %v", r.Kind)
	}
	if e.err != nil {
		return dst, e.err
	}
	return e.b, nil
}

// AppendSystemRecord appends a whole system record (envelope and body)
// for r to dst, ready for the store's PutRecord.
func AppendSystemRecord(dst []byte, r *SystemRecord) ([]byte, error) {
	body, err := AppendSystem(nil, r)
	if err != nil {
		return dst, err
	}
	return AppendEnvelope(dst, System, 0, nil, body)
}

// DecodeSystem decodes a system record body. It never panics; strings
// and blobs are copied, so the result does not alias body.
func DecodeSystem(body []byte) (*SystemRecord, error) {
	if len(body) < 2 {
		return nil, fmt.Errorf("%w: system record body of %d bytes", ErrCorrupt, len(body))
	}
	if body[0] != SystemVersion {
		return nil, fmt.Errorf("%w: system record version %d (this release reads %d; written by a newer release of Keel?)", ErrUnknownType, body[0], SystemVersion)
	}
	r := &SystemRecord{Kind: Kind(body[1])}
	d := sysDec{b: body[2:]}
	switch r.Kind {
	case KindOffsets:
		n := d.count(2 + 2 + 4 + 8)
		r.Offsets = make([]OffsetEntry, 0, n)
		for range n {
			r.Offsets = append(r.Offsets, OffsetEntry{Group: d.str(), Topic: d.str(), QueueID: int32(d.u32()), Offset: int64(d.u64())})
		}
	case KindOffsetsDelete:
		r.Group, r.Topic, r.QueueID = d.str(), d.str(), int32(d.u32())
		if d.err == nil && r.QueueID < -1 {
			d.err = fmt.Errorf("%w: offsets delete of queue %d", ErrCorrupt, r.QueueID)
		}
	case KindTopicConfig, KindGroupConfig:
		r.VersionTimestamp, r.VersionCounter = int64(d.u64()), int64(d.u64())
		r.Configs = d.entries()
	case KindDelayProgress:
		n := d.count(2 + 4 + 8)
		r.Cursors = make([]QueueCursor, 0, n)
		for range n {
			r.Cursors = append(r.Cursors, QueueCursor{Topic: d.str(), QueueID: int32(d.u32()), Offset: int64(d.u64())})
		}
	case KindAMQPQueues, KindAMQPExchanges, KindAMQPAcks:
		if f := d.need(1); f != nil && f[0] != AMQPFormat {
			return nil, fmt.Errorf("%w: %v system record of format %d (this release reads %d; written by a newer release of Keel?)", ErrUnknownType, r.Kind, f[0], AMQPFormat)
		}
		r.Vhost = d.str()
		r.Configs = d.entries()
	case KindKafkaTxn:
		r.Payload = d.blob()
	default:
		return nil, fmt.Errorf("%w: system record of unknown kind %d (written by a newer release of Keel?)", ErrUnknownType, body[1])
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d bytes after the %v system record", ErrCorrupt, len(d.b), r.Kind)
	}
	if d.err != nil {
		return nil, d.err
	}
	return r, nil
}

// CheckSystem validates a system record's body (DecodeSystem without
// keeping the result).
func CheckSystem(body []byte) error {
	_, err := DecodeSystem(body)
	return err
}

type sysEnc struct {
	b   []byte
	err error
}

// entries appends u32 N and N × (name string, blob).
func (e *sysEnc) entries(cs []ConfigEntry) {
	e.u32(uint32(len(cs)))
	for _, c := range cs {
		e.str(c.Name)
		e.u32(uint32(len(c.Config)))
		e.b = append(e.b, c.Config...)
	}
}

func (e *sysEnc) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *sysEnc) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *sysEnc) str(s string) {
	if len(s) > MaxSystemStringBytes {
		if e.err == nil {
			e.err = fmt.Errorf("record: a string of %d bytes in a system record (limit %d)", len(s), MaxSystemStringBytes)
		}
		return
	}
	e.b = binary.BigEndian.AppendUint16(e.b, uint16(len(s)))
	e.b = append(e.b, s...)
}

// sysDec reads a body; the first problem sticks and later reads return
// zeros.
type sysDec struct {
	b   []byte
	err error
}

func (d *sysDec) need(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || len(d.b) < n {
		d.err = fmt.Errorf("%w: system record ends %d bytes early", ErrCorrupt, n-len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *sysDec) u32() uint32 {
	if v := d.need(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *sysDec) u64() uint64 {
	if v := d.need(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *sysDec) str() string {
	v := d.need(2)
	if v == nil {
		return ""
	}
	return string(d.need(int(binary.BigEndian.Uint16(v))))
}

func (d *sysDec) blob() []byte {
	v := d.need(4)
	if v == nil {
		return nil
	}
	n := binary.BigEndian.Uint32(v)
	if uint64(n) > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: a blob of %d bytes, %d left", ErrCorrupt, n, len(d.b))
		return nil
	}
	return append([]byte(nil), d.need(int(n))...)
}

// entries reads what sysEnc.entries wrote; an empty blob is nil.
func (d *sysDec) entries() []ConfigEntry {
	n := d.count(2 + 4)
	cs := make([]ConfigEntry, 0, n)
	for range n {
		c := ConfigEntry{Name: d.str()}
		if blob := d.blob(); len(blob) > 0 {
			c.Config = blob
		}
		cs = append(cs, c)
	}
	return cs
}

// count reads an entry count and checks that the rest can hold that many
// entries of at least minBytes each (so a forged count allocates nothing).
func (d *sysDec) count(minBytes int) int {
	n := d.u32()
	if d.err == nil && uint64(n)*uint64(minBytes) > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: %d entries of at least %d bytes in %d", ErrCorrupt, n, minBytes, len(d.b))
		return 0
	}
	return int(n)
}
