package message

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"net/netip"
	"slices"
)

// ErrCorrupt is returned (wrapped) for a record or batch that does not parse.
var ErrCorrupt = errors.New("message: corrupt record")

// ErrTooLarge is returned (wrapped) by AppendStored for a field that does not
// fit the V1 layout.
var ErrTooLarge = errors.New("message: field too large")

// Fixed offsets of the fields before the first host field.
const (
	offTotalSize     = 0
	offMagic         = 4
	offBodyCRC       = 8
	offQueueID       = 12
	offFlag          = 16
	offQueueOffset   = 20
	offPhysOffset    = 28
	offSysFlag       = 36
	offBornTimestamp = 40
	offBornHost      = 48
)

// Host field sizes: IP bytes followed by an int32 port.
const (
	hostV4Bytes = 4 + 4
	hostV6Bytes = 16 + 4
)

// fixedBytes is the size of every field of a record except the two host
// fields and the variable-length body, topic and properties.
const fixedBytes = MinRecordBytes - 2*hostV4Bytes

// maxPort is the largest valid value of a stored port field.
const maxPort = math.MaxUint16

// bodyCRC is the BODYCRC field value of body.
func bodyCRC(body []byte) int32 {
	return int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF)
}

// hostBytes is the size of the stored field for a host; IPv4-mapped IPv6
// addresses and invalid (zero) addresses take the 8-byte IPv4 form.
func hostBytes(ap netip.AddrPort) int {
	if ap.Addr().Is6() && !ap.Addr().Is4In6() {
		return hostV6Bytes
	}
	return hostV4Bytes
}

// HostSysFlag returns sysFlag with FlagBornHostV6 and FlagStoreHostV6 set
// from the address families of born and store, as AppendStored writes them.
func HostSysFlag(sysFlag int32, born, store netip.AddrPort) int32 {
	sysFlag &^= FlagBornHostV6 | FlagStoreHostV6
	if hostBytes(born) == hostV6Bytes {
		sysFlag |= FlagBornHostV6
	}
	if hostBytes(store) == hostV6Bytes {
		sysFlag |= FlagStoreHostV6
	}
	return sysFlag
}

// StoredSize returns the size of m's stored record (TOTALSIZE).
func (m *Message) StoredSize() int {
	return fixedBytes + hostBytes(m.BornHost) + hostBytes(m.StoreHost) +
		len(m.Body) + len(m.Topic) + len(m.Properties)
}

// AppendStored appends m's stored record to dst and returns the extended
// slice. It computes BODYCRC and sets the host V6 sysflag bits. It returns an
// error for a topic longer than MaxTopicBytes or properties longer than
// MaxPropertiesBytes. It does not allocate when dst has room for the record.
func (m *Message) AppendStored(dst []byte) ([]byte, error) {
	if len(m.Topic) > MaxTopicBytes {
		return dst, fmt.Errorf("%w: topic is %d bytes, limit %d", ErrTooLarge, len(m.Topic), MaxTopicBytes)
	}
	if len(m.Properties) > MaxPropertiesBytes {
		return dst, fmt.Errorf("%w: properties are %d bytes, limit %d", ErrTooLarge, len(m.Properties), MaxPropertiesBytes)
	}
	size := m.StoredSize()
	if size > math.MaxInt32 {
		return dst, fmt.Errorf("%w: record is %d bytes", ErrTooLarge, size)
	}
	dst = slices.Grow(dst, size)
	be := binary.BigEndian
	dst = be.AppendUint32(dst, uint32(size))
	dst = be.AppendUint32(dst, bits(MagicV1))
	dst = be.AppendUint32(dst, uint32(bodyCRC(m.Body)))
	dst = be.AppendUint32(dst, uint32(m.QueueID))
	dst = be.AppendUint32(dst, uint32(m.Flag))
	dst = be.AppendUint64(dst, uint64(m.QueueOffset))
	dst = be.AppendUint64(dst, uint64(m.PhysOffset))
	dst = be.AppendUint32(dst, uint32(HostSysFlag(m.SysFlag, m.BornHost, m.StoreHost)))
	dst = be.AppendUint64(dst, uint64(m.BornTimestamp))
	dst = appendHost(dst, m.BornHost)
	dst = be.AppendUint64(dst, uint64(m.StoreTimestamp))
	dst = appendHost(dst, m.StoreHost)
	dst = be.AppendUint32(dst, uint32(m.ReconsumeTimes))
	dst = be.AppendUint64(dst, uint64(m.PreparedTxOffset))
	dst = be.AppendUint32(dst, uint32(len(m.Body)))
	dst = append(dst, m.Body...)
	dst = append(dst, byte(len(m.Topic)))
	dst = append(dst, m.Topic...)
	dst = be.AppendUint16(dst, uint16(len(m.Properties)))
	dst = append(dst, m.Properties...)
	return dst, nil
}

// appendHost appends the stored form of ap: 4 or 16 IP bytes and the port as
// an int32. An invalid address is written as 0.0.0.0.
func appendHost(dst []byte, ap netip.AddrPort) []byte {
	addr := ap.Addr().Unmap()
	switch {
	case addr.Is4():
		a := addr.As4()
		dst = append(dst, a[:]...)
	case addr.Is6():
		a := addr.As16()
		dst = append(dst, a[:]...)
	default:
		dst = append(dst, 0, 0, 0, 0)
	}
	return binary.BigEndian.AppendUint32(dst, uint32(ap.Port()))
}

// PatchStored rewrites QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP of an
// encoded record in place. rec must be a record written by AppendStored; a
// record too short to hold the fields is a bug and panics.
func PatchStored(rec []byte, queueOffset, physOffset, storeTimestamp int64) {
	v := View(rec)
	off := v.offStoreTimestamp()
	if len(rec) < off+8 {
		panic(fmt.Sprintf("message: PatchStored on a %d-byte record", len(rec)))
	}
	be := binary.BigEndian
	be.PutUint64(rec[offQueueOffset:], uint64(queueOffset))
	be.PutUint64(rec[offPhysOffset:], uint64(physOffset))
	be.PutUint64(rec[off:], uint64(storeTimestamp))
}

// layout holds the offsets of the variable part of a checked record.
type layout struct {
	bodyOff, bodyLen   int
	topicOff, topicLen int
	propsOff, propsLen int
}

// corrupt returns an error wrapping ErrCorrupt that names the offending field.
func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// Check validates the structure of one stored record (size fields agree with
// len(rec), magic, topic and properties lengths, host ports). It does not
// check BODYCRC (see View.CheckBodyCRC).
func Check(rec []byte) error {
	_, err := check(rec)
	return err
}

// check validates rec and returns the offsets of its variable-length fields.
// Every length is compared with the bytes that remain before it is used.
func check(rec []byte) (layout, error) {
	var l layout
	if len(rec) < MinRecordBytes {
		return l, corrupt("record is %d bytes, minimum %d", len(rec), MinRecordBytes)
	}
	v := View(rec)
	if total := v.TotalSize(); int64(total) != int64(len(rec)) {
		return l, corrupt("TOTALSIZE %d, record is %d bytes", total, len(rec))
	}
	if magic := v.MagicCode(); magic != MagicV1 {
		return l, corrupt("MAGICCODE %#08x, want V1 %#08x", bits(magic), bits(MagicV1))
	}
	// The minimum size covers both hosts in IPv4 form; V6 hosts add 12 bytes each.
	if min := fixedBytes + v.bornHostBytes() + v.storeHostBytes(); len(rec) < min {
		return l, corrupt("record is %d bytes, sysflag %#x needs at least %d", len(rec), uint32(v.SysFlag()), min)
	}
	if err := checkPort("BORNHOST", v.bornPort()); err != nil {
		return l, err
	}
	if err := checkPort("STOREHOST", v.storePort()); err != nil {
		return l, err
	}
	return checkVariable(rec, v.offBodyLen())
}

// checkVariable validates BODYLEN, TOPICLEN and PROPLEN of rec, whose BODYLEN
// field is at off, and that the properties end exactly at len(rec).
func checkVariable(rec []byte, off int) (layout, error) {
	var l layout
	// Bytes that must follow the body: TOPICLEN and PROPLEN.
	const trailerBytes = 1 + 2
	bodyLen := int64(int32(binary.BigEndian.Uint32(rec[off:])))
	l.bodyOff = off + 4
	if bodyLen < 0 || bodyLen > int64(len(rec)-l.bodyOff-trailerBytes) {
		return l, corrupt("BODYLEN %d at offset %d, record is %d bytes", bodyLen, off, len(rec))
	}
	l.bodyLen = int(bodyLen)
	off = l.bodyOff + l.bodyLen
	topicLen := int(int8(rec[off]))
	l.topicOff = off + 1
	if topicLen < 0 || topicLen > len(rec)-l.topicOff-2 {
		return l, corrupt("TOPICLEN %d at offset %d, record is %d bytes", topicLen, off, len(rec))
	}
	l.topicLen = topicLen
	off = l.topicOff + l.topicLen
	propsLen := int(int16(binary.BigEndian.Uint16(rec[off:])))
	l.propsOff = off + 2
	if propsLen < 0 || propsLen != len(rec)-l.propsOff {
		return l, corrupt("PROPLEN %d at offset %d, %d bytes remain", propsLen, off, len(rec)-l.propsOff)
	}
	l.propsLen = propsLen
	return l, nil
}

func checkPort(field string, port int32) error {
	if port < 0 || port > maxPort {
		return corrupt("%s port %d", field, port)
	}
	return nil
}

// Decode parses a stored record. Body aliases rec; Topic and Properties are
// copies.
func Decode(rec []byte) (*Message, error) {
	l, err := check(rec)
	if err != nil {
		return nil, err
	}
	v := View(rec)
	return &Message{
		Topic:            string(rec[l.topicOff : l.topicOff+l.topicLen]),
		QueueID:          v.QueueID(),
		Flag:             v.Flag(),
		SysFlag:          v.SysFlag(),
		BornTimestamp:    v.BornTimestamp(),
		BornHost:         v.BornHost(),
		StoreHost:        v.StoreHost(),
		ReconsumeTimes:   v.ReconsumeTimes(),
		PreparedTxOffset: v.PreparedTxOffset(),
		Body:             rec[l.bodyOff : l.bodyOff+l.bodyLen : l.bodyOff+l.bodyLen],
		Properties:       string(rec[l.propsOff : l.propsOff+l.propsLen]),
		QueueOffset:      v.QueueOffset(),
		PhysOffset:       v.PhysOffset(),
		StoreTimestamp:   v.StoreTimestamp(),
	}, nil
}

// bits returns the two's complement bits of x (for constants that do not fit
// a uint32 conversion).
func bits(x int32) uint32 { return uint32(x) }
