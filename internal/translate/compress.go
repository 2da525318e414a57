package translate

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// ErrTooLarge is wrapped by the error for input that inflates, or
// converts, beyond the caller's limit: the conversion is refused before
// the memory is taken.
var ErrTooLarge = errors.New("translate: converted data exceeds the limit")

// ErrMalformed is wrapped by the errors about input that does not parse.
var ErrMalformed = errors.New("translate: malformed input")

// Kafka's compression codecs (batch attributes, bits 0-2).
const (
	codecNone   = 0
	codecGzip   = 1
	codecSnappy = 2
	codecLZ4    = 3
	codecZstd   = 4
)

func codecName(c int) string {
	switch c {
	case codecNone:
		return "none"
	case codecGzip:
		return "gzip"
	case codecSnappy:
		return "snappy"
	case codecLZ4:
		return "lz4"
	case codecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec %d", c)
}

// inflate returns the decompressed src of Kafka codec c, refusing output
// beyond limit bytes without producing it.
func inflate(c int, src []byte, limit int) ([]byte, error) {
	return inflateInto(nil, c, src, limit)
}

// inflateInto is inflate writing the inflated bytes over dst (its
// capacity reused; the result may be a new slice when dst is too small).
// An uncompressed src is returned as it is.
func inflateInto(dst []byte, c int, src []byte, limit int) ([]byte, error) {
	dst = dst[:0]
	switch c {
	case codecNone:
		return src, nil
	case codecGzip:
		zr, err := gzip.NewReader(bytes.NewReader(src))
		if err != nil {
			return nil, fmt.Errorf("%w: gzip: %v", ErrMalformed, err)
		}
		return readLimited(dst, zr, "gzip", limit)
	case codecSnappy:
		return inflateSnappy(dst, src, limit)
	case codecLZ4:
		zr := lz4.NewReader(bytes.NewReader(src))
		return readLimited(dst, zr, "lz4", limit)
	case codecZstd:
		d := zstdPool.Get().(*zstdDecoder)
		defer zstdPool.Put(d)
		if d.err != nil {
			return nil, fmt.Errorf("translate: zstd: %v", d.err)
		}
		if err := d.d.Reset(bytes.NewReader(src)); err != nil {
			return nil, fmt.Errorf("%w: zstd: %v", ErrMalformed, err)
		}
		return readLimited(dst, d.d, "zstd", limit)
	}
	return nil, fmt.Errorf("%w: unknown compression codec %d", ErrMalformed, c)
}

// inflateZlib is inflate for RocketMQ's compressed bodies (zlib).
func inflateZlib(src []byte, limit int) ([]byte, error) {
	zr, err := zlib.NewReader(bytes.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("%w: zlib: %v", ErrMalformed, err)
	}
	return readLimited(nil, zr, "zlib", limit)
}

// readLimited reads r to its end over dst, failing once more than limit
// bytes come.
func readLimited(dst []byte, r io.Reader, codec string, limit int) ([]byte, error) {
	buf := bytes.NewBuffer(dst[:0])
	n, err := buf.ReadFrom(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMalformed, codec, err)
	}
	if n > int64(limit) {
		return nil, fmt.Errorf("%w: %s data inflates beyond %d bytes", ErrTooLarge, codec, limit)
	}
	return buf.Bytes(), nil
}

// xerialMagic opens snappy data in the framing of the Java client
// (xerial snappy-java): the magic, two int32 versions, then chunks of a
// big-endian int32 length and a raw snappy block.
var xerialMagic = []byte{0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0}

func inflateSnappy(dst, src []byte, limit int) ([]byte, error) {
	if !bytes.HasPrefix(src, xerialMagic) {
		return snappyBlock(dst[:0], src, limit)
	}
	if len(src) < 16 {
		return nil, fmt.Errorf("%w: snappy: xerial header of %d bytes", ErrMalformed, len(src))
	}
	out := dst[:0]
	for rest := src[16:]; len(rest) > 0; {
		if len(rest) < 4 {
			return nil, fmt.Errorf("%w: snappy: truncated xerial chunk length", ErrMalformed)
		}
		n := binary.BigEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-4) {
			return nil, fmt.Errorf("%w: snappy: xerial chunk of %d bytes, %d left", ErrMalformed, n, len(rest)-4)
		}
		var err error
		if out, err = snappyBlock(out, rest[4:4+n], limit); err != nil {
			return nil, err
		}
		rest = rest[4+n:]
	}
	return out, nil
}

// snappyBlock appends the decoded raw snappy block src to dst, checking
// the length the block announces before decoding it.
func snappyBlock(dst, src []byte, limit int) ([]byte, error) {
	n, err := s2.DecodedLen(src)
	if err != nil {
		return nil, fmt.Errorf("%w: snappy: %v", ErrMalformed, err)
	}
	if n > limit-len(dst) {
		return nil, fmt.Errorf("%w: snappy data inflates beyond %d bytes", ErrTooLarge, limit)
	}
	dst = slices.Grow(dst, n)
	into := dst[len(dst) : len(dst)+n]
	out, err := s2.Decode(into, src)
	if err != nil {
		return nil, fmt.Errorf("%w: snappy: %v", ErrMalformed, err)
	}
	if len(out) != n {
		return nil, fmt.Errorf("%w: snappy: %d bytes decoded, %d announced", ErrMalformed, len(out), n)
	}
	copy(into, out) // s2 decodes into into itself, which is large enough
	return dst[:len(dst)+n], nil
}

// zstdDecoder is a pooled streaming decoder (one goroutine each, a bounded
// window: a frame asking for a larger one is refused).
type zstdDecoder struct {
	d   *zstd.Decoder
	err error
}

// zstdMaxWindow bounds the window a zstd frame may ask for.
const zstdMaxWindow = 8 << 20

var zstdPool = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(zstdMaxWindow))
	return &zstdDecoder{d: d, err: err}
}}
