package message

import (
	"encoding/binary"
	"net/netip"
)

// View gives allocation-free access to the fields of a record that passed
// Check. Methods on a View that did not pass Check may panic, except TotalSize
// and MagicCode, which read only the first 8 bytes and so can frame records
// while scanning a log, before Check.
type View []byte

func (v View) i32(off int) int32 { return int32(binary.BigEndian.Uint32(v[off:])) }
func (v View) i64(off int) int64 { return int64(binary.BigEndian.Uint64(v[off:])) }

func (v View) bornHostBytes() int {
	if v.SysFlag()&FlagBornHostV6 != 0 {
		return hostV6Bytes
	}
	return hostV4Bytes
}

func (v View) storeHostBytes() int {
	if v.SysFlag()&FlagStoreHostV6 != 0 {
		return hostV6Bytes
	}
	return hostV4Bytes
}

func (v View) offStoreTimestamp() int { return offBornHost + v.bornHostBytes() }
func (v View) offStoreHost() int      { return v.offStoreTimestamp() + 8 }
func (v View) offReconsume() int      { return v.offStoreHost() + v.storeHostBytes() }
func (v View) offPreparedTx() int     { return v.offReconsume() + 4 }
func (v View) offBodyLen() int        { return v.offPreparedTx() + 8 }
func (v View) offBody() int           { return v.offBodyLen() + 4 }
func (v View) offTopicLen() int       { return v.offBody() + int(v.i32(v.offBodyLen())) }
func (v View) offPropsLen() int       { t := v.offTopicLen(); return t + 1 + int(v[t]) }

func (v View) bornPort() int32  { return v.i32(offBornHost + v.bornHostBytes() - 4) }
func (v View) storePort() int32 { return v.i32(v.offStoreHost() + v.storeHostBytes() - 4) }

// host decodes the host field at off, of size n (hostV4Bytes or hostV6Bytes).
func (v View) host(off, n int) netip.AddrPort {
	port := uint16(v.i32(off + n - 4))
	if n == hostV6Bytes {
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(v[off:off+16])), port)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(v[off:off+4])), port)
}

func (v View) TotalSize() int32        { return v.i32(offTotalSize) }
func (v View) MagicCode() int32        { return v.i32(offMagic) }
func (v View) BodyCRC() int32          { return v.i32(offBodyCRC) }
func (v View) QueueID() int32          { return v.i32(offQueueID) }
func (v View) Flag() int32             { return v.i32(offFlag) }
func (v View) QueueOffset() int64      { return v.i64(offQueueOffset) }
func (v View) PhysOffset() int64       { return v.i64(offPhysOffset) }
func (v View) SysFlag() int32          { return v.i32(offSysFlag) }
func (v View) BornTimestamp() int64    { return v.i64(offBornTimestamp) }
func (v View) StoreTimestamp() int64   { return v.i64(v.offStoreTimestamp()) }
func (v View) ReconsumeTimes() int32   { return v.i32(v.offReconsume()) }
func (v View) PreparedTxOffset() int64 { return v.i64(v.offPreparedTx()) }

// BornHost is the producer's address.
func (v View) BornHost() netip.AddrPort { return v.host(offBornHost, v.bornHostBytes()) }

// StoreHost is the storing broker's address.
func (v View) StoreHost() netip.AddrPort { return v.host(v.offStoreHost(), v.storeHostBytes()) }

// Body returns the stored (possibly compressed) body; it aliases v.
func (v View) Body() []byte {
	off := v.offBody()
	end := off + int(v.i32(v.offBodyLen()))
	return v[off:end:end]
}

// Topic returns the topic bytes; they alias v.
func (v View) Topic() []byte {
	t := v.offTopicLen()
	end := t + 1 + int(v[t])
	return v[t+1 : end : end]
}

// Properties returns the encoded properties; they alias v.
func (v View) Properties() []byte {
	p := v.offPropsLen()
	end := p + 2 + int(binary.BigEndian.Uint16(v[p:]))
	return v[p+2 : end : end]
}

// Property returns the value of key in the record's properties (aliasing v).
func (v View) Property(key string) ([]byte, bool) { return Property(v.Properties(), key) }

// Tags returns the TAGS property, or nil.
func (v View) Tags() []byte { t, _ := v.Property(PropTags); return t }

// Keys returns the KEYS property (space-separated business keys), or nil.
func (v View) Keys() []byte { k, _ := v.Property(PropKeys); return k }

// UniqKey returns the UNIQ_KEY property (the client message id), or nil.
func (v View) UniqKey() []byte { u, _ := v.Property(PropUniqKey); return u }

// IndexProps returns the TAGS, KEYS and UNIQ_KEY properties (each nil when
// absent) with one pass over the properties, as Tags, Keys and UniqKey
// would find them: what the dispatcher reads of every record.
func (v View) IndexProps() (tags, keys, uniq []byte) {
	props := v.Properties()
	for off := 0; off < len(props); {
		item, next, sep := nextItem(props, off)
		off = next
		if sep < 0 {
			continue
		}
		switch name := item[:sep]; {
		case equalName(name, PropTags):
			tags = item[sep+1:]
		case equalName(name, PropKeys):
			keys = item[sep+1:]
		case equalName(name, PropUniqKey):
			uniq = item[sep+1:]
		}
	}
	return tags, keys, uniq
}

// CheckBodyCRC reports whether BODYCRC matches the body; the error wraps
// ErrCorrupt.
func (v View) CheckBodyCRC() error {
	if got, want := bodyCRC(v.Body()), v.BodyCRC(); got != want {
		return corrupt("BODYCRC %#08x, body has %#08x", uint32(want), uint32(got))
	}
	return nil
}
