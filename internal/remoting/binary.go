package remoting

import (
	"encoding/binary"
	"fmt"
	"math"
)

// binaryFixedBytes is the fixed part of a ROCKETMQ header: code(2)
// language(1) version(2) opaque(4) flag(4) remarkLen(4) extLen(4).
const binaryFixedBytes = 21

// appendBinaryHeader appends the ROCKETMQ binary header of c. Ext entries
// are written in sorted key order.
func appendBinaryHeader(dst []byte, c *Command) ([]byte, error) {
	dst = binary.BigEndian.AppendUint16(dst, uint16(c.Code))
	lang := c.Language
	if lang == "" {
		lang = LanguageJava
	}
	dst = append(dst, languageCode(lang))
	dst = binary.BigEndian.AppendUint16(dst, uint16(c.Version))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Opaque))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Flag))
	if len(c.Remark) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: remark too long", ErrBadHeader)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.Remark)))
	dst = append(dst, c.Remark...)
	lenAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	var stack [maxStackExtFields]extPair
	for _, f := range sortedFields(stack[:0], c) {
		k, v := f.key, f.value
		if len(k) > math.MaxInt16 {
			return nil, fmt.Errorf("%w: ext key of %d bytes exceeds int16", ErrBadHeader, len(k))
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	extLen := len(dst) - lenAt - 4
	if extLen > math.MaxInt32 {
		return nil, fmt.Errorf("%w: ext fields too long", ErrBadHeader)
	}
	binary.BigEndian.PutUint32(dst[lenAt:], uint32(extLen))
	return dst, nil
}

// decodeBinaryHeader parses a ROCKETMQ binary header. Every length is
// checked against the bytes present before anything is allocated.
func decodeBinaryHeader(data []byte) (*Command, error) {
	if len(data) < binaryFixedBytes {
		return nil, fmt.Errorf("%w: rocketmq header of %d bytes is shorter than %d", ErrBadHeader, len(data), binaryFixedBytes)
	}
	c := &Command{SerializeType: SerializeRocketMQ}
	c.Code = int16(binary.BigEndian.Uint16(data[0:]))
	c.Language = languageName(data[2])
	c.Version = int16(binary.BigEndian.Uint16(data[3:]))
	c.Opaque = int32(binary.BigEndian.Uint32(data[5:]))
	c.Flag = int32(binary.BigEndian.Uint32(data[9:]))
	rest := data[13:]
	remark, rest, err := binaryChunk(rest, "remark")
	if err != nil {
		return nil, err
	}
	ext, rest, err := binaryChunk(rest, "extFields")
	if err != nil {
		return nil, err
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after rocketmq header fields", ErrBadHeader, len(rest))
	}
	fields := countBinaryExt(ext)
	if fields > MaxExtFields {
		// Refused before the header is copied.
		return nil, fmt.Errorf("%w: rocketmq header has more than %d ext fields", ErrHeaderLimit, MaxExtFields)
	}
	// One copy of the header backs the remark and every ext key and value.
	src := string(data)
	c.Remark = src[13+4 : 13+4+len(remark)]
	if len(ext) > 0 {
		extAt := len(data) - len(ext)
		if c.ExtFields, err = decodeBinaryExt(ext, src[extAt:], fields); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// binaryChunk splits an int32-length-prefixed chunk off b.
func binaryChunk(b []byte, what string) (chunk, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: rocketmq header truncated before %s length", ErrBadHeader, what)
	}
	n := int64(int32(binary.BigEndian.Uint32(b)))
	b = b[4:]
	if n < 0 || n > int64(len(b)) {
		return nil, nil, fmt.Errorf("%w: rocketmq %s length %d exceeds the %d bytes left", ErrBadHeader, what, n, len(b))
	}
	return b[:n], b[n:], nil
}

// decodeBinaryExt parses repeated keyLen(int16) key valLen(int32) value,
// fields of them (countBinaryExt's count, to size the map); src holds the
// same bytes as b and backs the returned strings.
func decodeBinaryExt(b []byte, src string, fields int) (map[string]string, error) {
	at := func(p []byte) int { return len(src) - len(p) } // offset of p within b
	m := make(map[string]string, fields)
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, fmt.Errorf("%w: rocketmq ext entry truncated", ErrBadHeader)
		}
		kl := int(int16(binary.BigEndian.Uint16(b)))
		b = b[2:]
		if kl < 0 || kl > len(b) {
			return nil, fmt.Errorf("%w: rocketmq ext key length %d exceeds the %d bytes left", ErrBadHeader, kl, len(b))
		}
		key := b[:kl]
		val, rest, err := binaryChunk(b[kl:], "ext value")
		if err != nil {
			return nil, err
		}
		k := src[at(b) : at(b)+len(key)]
		v := src[at(rest)-len(val) : at(rest)]
		m[k] = v
		b = rest
	}
	return m, nil
}

// countBinaryExt counts the well-formed ext entries at the start of b, to
// size the map (a map that grows while decoding allocates several times),
// and stops counting past MaxExtFields, which no map is made for.
func countBinaryExt(b []byte) int {
	n := 0
	for len(b) >= 2 && n <= MaxExtFields {
		kl := int(int16(binary.BigEndian.Uint16(b)))
		if kl < 0 || 2+kl+4 > len(b) {
			break
		}
		vl := int(int32(binary.BigEndian.Uint32(b[2+kl:])))
		if vl < 0 || vl > len(b)-2-kl-4 {
			break
		}
		b = b[2+kl+4+vl:]
		n++
	}
	return n
}
