package translate

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
)

func putU32(b []byte, v uint32) []byte { binary.BigEndian.PutUint32(b, v); return b }

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func zlibBytes(b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}
