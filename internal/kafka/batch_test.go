package kafka

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// testBatch builds an uncompressed v2 batch of n records with values
// "v0".."v(n-1)" (a hand-made batch, for the validation tests only; the
// end-to-end tests use real clients).
func testBatch(n int, base int64) []byte {
	var recs []byte
	for i := range n {
		var r []byte
		r = append(r, 0)                     // attributes
		r = binary.AppendVarint(r, 0)        // timestamp delta
		r = binary.AppendVarint(r, int64(i)) // offset delta
		r = binary.AppendVarint(r, -1)       // null key
		v := []byte{'v', byte('0' + i%10)}
		r = binary.AppendVarint(r, int64(len(v)))
		r = append(r, v...)
		r = binary.AppendVarint(r, 0) // headers
		recs = binary.AppendVarint(recs, int64(len(r)))
		recs = append(recs, r...)
	}
	b := make([]byte, batchHeaderBytes, batchHeaderBytes+len(recs))
	be := binary.BigEndian
	be.PutUint64(b, uint64(base))
	be.PutUint32(b[8:], uint32(batchHeaderBytes-12+len(recs)))
	be.PutUint32(b[12:], 0xffffffff)
	b[16] = 2
	be.PutUint32(b[23:], uint32(n-1))
	be.PutUint64(b[27:], 1000)
	be.PutUint64(b[35:], 1000)
	be.PutUint64(b[43:], 0xffffffffffffffff)
	be.PutUint16(b[51:], 0xffff)
	be.PutUint32(b[53:], 0xffffffff)
	be.PutUint32(b[57:], uint32(n))
	b = append(b, recs...)
	be.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

func recrc(b []byte) []byte {
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], castagnoli))
	return b
}

// TestCheckBatch: each rule of the validation refuses with the code
// clients expect, and a good batch passes.
func TestCheckBatch(t *testing.T) {
	good := testBatch(3, 0)
	if h, err := checkBatch(good, 1<<20, 9); err != nil || h.records != 3 {
		t.Fatalf("good batch: %v %+v", err, h)
	}
	mod := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := []struct {
		name string
		b    []byte
		max  int
		ver  int16
		code int16
	}{
		{"too large", good, len(good) - 1, 9, errMessageTooLarge},
		{"short", good[:40], 1 << 20, 9, errCorruptMessage},
		{"two batches", append(append([]byte(nil), good...), good...), 1 << 20, 9, errCorruptMessage},
		{"magic 1", mod(func(b []byte) []byte { b[16] = 1; return b }), 1 << 20, 9, errCorruptMessage},
		{"bad crc", mod(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), 1 << 20, 9, errCorruptMessage},
		{"codec 5", mod(func(b []byte) []byte { b[22] |= 5; return recrc(b) }), 1 << 20, 9, errCorruptMessage},
		{"zstd before v7", mod(func(b []byte) []byte { b[22] |= 4; return recrc(b) }), 1 << 20, 6, errInvalidRecord},
		{"control", mod(func(b []byte) []byte { b[22] |= 0x20; return recrc(b) }), 1 << 20, 9, errInvalidRecord},
		{"count mismatch", mod(func(b []byte) []byte { b[60] = 4; return recrc(b) }), 1 << 20, 9, errInvalidRecord},
		{"records short", mod(func(b []byte) []byte {
			binary.BigEndian.PutUint32(b[23:], 3)
			b[60] = 4
			return recrc(b)
		}), 1 << 20, 9, errCorruptMessage},
	}
	for _, c := range cases {
		if _, err := checkBatch(c.b, c.max, c.ver); err == nil || err.code != c.code {
			t.Errorf("%s: %v, want code %d", c.name, err, c.code)
		}
	}
}
