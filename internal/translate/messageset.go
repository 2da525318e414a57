package translate

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// A Kafka message set of magic 0 or 1 (what Produce v0–v2 carries) is a
// sequence of entries, big-endian:
//
//	off size field
//	  0    8 offset
//	  8    4 messageSize (bytes after this field)
//	 12    4 crc (CRC-32, IEEE, of everything after it)
//	 16    1 magic (0 or 1)
//	 17    1 attributes (bits 0-2 codec; magic 1: bit 3 LogAppendTime)
//	 18    8 timestamp (magic 1 only)
//	  .    4 key length (-1 null), key
//	  .    4 value length (-1 null), value
//
// A compressed entry (a wrapper) holds in its value a whole message set,
// compressed; its inner entries are the messages.
const (
	messageSetHeaderBytes = 12
	minMessageV0Bytes     = 4 + 1 + 1 + 4 + 4 // crc .. value length
	msgAttrLogAppend      = 0x08
)

// UpgradeMessageSet converts a message set of magic 0 or 1 into one
// uncompressed RecordBatch (magic 2), as a Kafka broker up-converts old
// formats when it appends them — the one conversion on the write path,
// and one Kafka makes itself. Every entry's CRC is checked; a compressed
// wrapper (gzip, snappy, lz4) is inflated within limit and its inner
// messages become records (a wrapper inside a wrapper is refused). Keys,
// values and timestamps are kept (magic 0 has none: -1, as Kafka gives
// them; a wrapper marked LogAppendTime stamps its messages with its own
// timestamp); records get offsets 0..n-1, for the store to assign the
// real ones. Malformed input gets an error wrapping ErrMalformed, a set
// inflating beyond limit ErrTooLarge; it never panics.
func UpgradeMessageSet(b []byte, limit int) ([]byte, error) {
	var w KafkaBatchWriter
	var out []byte
	n := int64(0)
	err := eachMessage(b, limit, false, func(ts int64, key, value []byte) {
		if len(out) > limit {
			return // refused below; nothing more is written
		}
		r := KafkaRecord{Offset: n, Timestamp: ts, Key: key, Value: value}
		out = w.Append(out, &r)
		n++
	})
	switch {
	case err != nil:
		return nil, err
	case n == 0:
		return nil, fmt.Errorf("%w: an empty message set", ErrMalformed)
	case len(out) > limit:
		return nil, fmt.Errorf("%w: the message set makes a batch beyond %d bytes", ErrTooLarge, limit)
	}
	return w.Close(out), nil
}

// eachMessage calls fn for every message of the set b, inflating
// wrappers (inner: b is a wrapper's inflated value, where a further
// wrapper is refused).
func eachMessage(b []byte, limit int, inner bool, fn func(ts int64, key, value []byte)) error {
	be := binary.BigEndian
	for i := 0; len(b) > 0; i++ {
		if len(b) < messageSetHeaderBytes {
			return fmt.Errorf("%w: message set entry %d: %d bytes, the header is %d", ErrMalformed, i, len(b), messageSetHeaderBytes)
		}
		size := int64(int32(be.Uint32(b[8:])))
		if size < minMessageV0Bytes || size > int64(len(b)-messageSetHeaderBytes) {
			return fmt.Errorf("%w: message set entry %d: size %d, %d bytes follow", ErrMalformed, i, size, len(b)-messageSetHeaderBytes)
		}
		m := b[messageSetHeaderBytes : messageSetHeaderBytes+size]
		b = b[messageSetHeaderBytes+size:]
		if got, want := crc32.ChecksumIEEE(m[4:]), be.Uint32(m); got != want {
			return fmt.Errorf("%w: message %d: CRC %#08x, the bytes give %#08x", ErrMalformed, i, want, got)
		}
		magic, attrs := m[4], m[5]
		d := m[6:]
		ts := int64(-1)
		switch magic {
		case 0:
		case 1:
			if len(d) < 8 {
				return fmt.Errorf("%w: message %d: no room for its timestamp", ErrMalformed, i)
			}
			ts, d = int64(be.Uint64(d)), d[8:]
		default:
			return fmt.Errorf("%w: message %d: magic %d in a message set (0 or 1)", ErrMalformed, i, magic)
		}
		key, d, err := sizedBytes(d)
		if err != nil {
			return fmt.Errorf("%w: message %d key: %v", ErrMalformed, i, err)
		}
		value, d, err := sizedBytes(d)
		if err != nil {
			return fmt.Errorf("%w: message %d value: %v", ErrMalformed, i, err)
		}
		if len(d) != 0 {
			return fmt.Errorf("%w: message %d: %d bytes past its value", ErrMalformed, i, len(d))
		}
		codec := int(attrs & attrCodecMask)
		if codec == codecNone {
			fn(ts, key, value)
			continue
		}
		if inner {
			return fmt.Errorf("%w: message %d: a compressed message inside a compressed message", ErrMalformed, i)
		}
		if codec > codecLZ4 {
			return fmt.Errorf("%w: message %d: codec %d in a message set (gzip, snappy or lz4)", ErrMalformed, i, codec)
		}
		set, err := inflate(codec, value, limit)
		if err != nil {
			return err
		}
		wrapperTs, logAppend := ts, magic == 1 && attrs&msgAttrLogAppend != 0
		err = eachMessage(set, limit, true, func(its int64, k, v []byte) {
			if logAppend {
				its = wrapperTs
			}
			fn(its, k, v)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// sizedBytes reads an int32-length-prefixed field (-1: nil).
func sizedBytes(d []byte) (v, rest []byte, err error) {
	if len(d) < 4 {
		return nil, nil, fmt.Errorf("%d bytes, no room for a length", len(d))
	}
	n := int64(int32(binary.BigEndian.Uint32(d)))
	d = d[4:]
	switch {
	case n == -1:
		return nil, d, nil
	case n < 0 || n > int64(len(d)):
		return nil, nil, fmt.Errorf("length %d, %d bytes follow", n, len(d))
	}
	return d[:n:n], d[n:], nil
}
