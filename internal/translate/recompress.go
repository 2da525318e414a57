package translate

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Kafka codec numbers for RecompressKafkaBatch (batch attributes, bits
// 0-2).
const (
	CodecNone   = codecNone
	CodecGzip   = codecGzip
	CodecSnappy = codecSnappy
	CodecLZ4    = codecLZ4
	CodecZstd   = codecZstd
)

// KafkaBatchCodec is the codec of a whole RecordBatch v2 (it must hold at
// least its header).
func KafkaBatchCodec(b []byte) int { return int(binary.BigEndian.Uint16(b[21:]) & attrCodecMask) }

// RecompressKafkaBatch returns a copy of the whole RecordBatch v2 b (its
// CRC already checked) with its records compressed with codec instead of
// b's: the header is kept but for the codec bits of its attributes and
// its batchLength, and the CRC-32C is computed again, as a Kafka broker
// recompresses to a topic's compression.type. Decompressed records beyond
// limit bytes are refused (ErrTooLarge) before they are produced.
func RecompressKafkaBatch(b []byte, codec, limit int) ([]byte, error) {
	h, err := parseKafkaHeader(b)
	if err != nil {
		return nil, err
	}
	data, err := inflate(int(h.attrs&attrCodecMask), b[batchHeaderBytes:], limit)
	if err != nil {
		return nil, err
	}
	out := append(make([]byte, 0, batchHeaderBytes+len(data)/2+64), b[:batchHeaderBytes]...)
	switch codec {
	case codecNone:
		out = append(out, data...)
	case codecGzip:
		w := gzipPool.Get().(*gzip.Writer)
		buf := bytes.NewBuffer(out)
		w.Reset(buf)
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		gzipPool.Put(w)
		out = buf.Bytes()
	case codecSnappy: // the raw block format, which every Kafka client reads
		out = append(out, s2.EncodeSnappy(nil, data)...)
	case codecLZ4:
		buf := bytes.NewBuffer(out)
		w := lz4.NewWriter(buf)
		_, err = w.Write(data)
		if cerr := w.Close(); err == nil {
			err = cerr
		}
		out = buf.Bytes()
	case codecZstd:
		e := zstdEncPool.Get().(*zstdEncoder)
		if e.err != nil {
			err = e.err
		} else {
			out = e.e.EncodeAll(data, out)
		}
		zstdEncPool.Put(e)
	default:
		return nil, fmt.Errorf("translate: unknown compression codec %d", codec)
	}
	if err != nil {
		return nil, fmt.Errorf("translate: compress with %s: %w", codecName(codec), err)
	}
	attrs := uint16(h.attrs)&^attrCodecMask | uint16(codec)
	binary.BigEndian.PutUint16(out[21:], attrs)
	binary.BigEndian.PutUint32(out[8:], uint32(len(out)-12))
	binary.BigEndian.PutUint32(out[17:], crc32.Checksum(out[21:], castagnoli))
	return out, nil
}

var gzipPool = sync.Pool{New: func() any { return gzip.NewWriter(nil) }}

type zstdEncoder struct {
	e   *zstd.Encoder
	err error
}

var zstdEncPool = sync.Pool{New: func() any {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	return &zstdEncoder{e: e, err: err}
}}
