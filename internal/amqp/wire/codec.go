package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrMalformed is wrapped by every decoding error: the peer sent bytes
// that are not what the protocol allows (a syntax error, reply code 502,
// or a frame error, 501).
var ErrMalformed = errors.New("amqp: malformed")

var errContinuationFlags = fmt.Errorf("%w: content header with a second property-flag word", ErrMalformed)

// Method is one generated AMQP method.
type Method interface {
	ID() (classID, methodID uint16)
	Name() string
	HasContent() bool
	Read(r *Reader) error
	Write(w *Writer)
}

// Reader decodes primitive types from a payload. The first error sticks:
// later reads return zero values.
type Reader struct {
	buf []byte
	err error
}

// NewReader reads from b (aliased: strings and tables are copied out).
func NewReader(b []byte) *Reader { return &Reader{buf: b} }

// Err returns the first error.
func (r *Reader) Err() error { return r.err }

// Len returns the bytes not yet read.
func (r *Reader) Len() int { return len(r.buf) }

func (r *Reader) fail(what string, need int) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s needs %d bytes, %d left", ErrMalformed, what, need, len(r.buf))
	}
	r.buf = nil
}

func (r *Reader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.buf) {
		r.fail(what, n)
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}

// Octet reads one byte.
func (r *Reader) Octet() uint8 {
	if b := r.take(1, "octet"); b != nil {
		return b[0]
	}
	return 0
}

// Short reads a big-endian uint16.
func (r *Reader) Short() uint16 {
	if b := r.take(2, "short"); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

// Long reads a big-endian uint32.
func (r *Reader) Long() uint32 {
	if b := r.take(4, "long"); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

// LongLong reads a big-endian uint64.
func (r *Reader) LongLong() uint64 {
	if b := r.take(8, "longlong"); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

// ShortStr reads an octet length and that many bytes.
func (r *Reader) ShortStr() string {
	n := int(r.Octet())
	return string(r.take(n, "shortstr"))
}

// LongStr reads a long length and that many bytes (a copy).
func (r *Reader) LongStr() []byte {
	n := r.Long()
	if n > math.MaxInt32 {
		r.fail("longstr", math.MaxInt32)
		return nil
	}
	b := r.take(int(n), "longstr")
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

// Writer encodes primitive types by appending to Buf.
type Writer struct {
	Buf []byte
}

// Octet appends one byte.
func (w *Writer) Octet(v uint8) { w.Buf = append(w.Buf, v) }

// Short appends a big-endian uint16.
func (w *Writer) Short(v uint16) { w.Buf = binary.BigEndian.AppendUint16(w.Buf, v) }

// Long appends a big-endian uint32.
func (w *Writer) Long(v uint32) { w.Buf = binary.BigEndian.AppendUint32(w.Buf, v) }

// LongLong appends a big-endian uint64.
func (w *Writer) LongLong(v uint64) { w.Buf = binary.BigEndian.AppendUint64(w.Buf, v) }

// ShortStr appends a short string; one longer than 255 bytes is cut (the
// server only sends names it accepted, which are at most 255).
func (w *Writer) ShortStr(s string) {
	if len(s) > 255 {
		s = s[:255]
	}
	w.Buf = append(append(w.Buf, byte(len(s))), s...)
}

// LongStr appends a long string.
func (w *Writer) LongStr(b []byte) {
	w.Long(uint32(len(b)))
	w.Buf = append(w.Buf, b...)
}

// Bits packs up to eight bits into one octet, the first in the low bit.
func (w *Writer) Bits(bits ...bool) {
	var o uint8
	for i, b := range bits {
		if b {
			o |= 1 << i
		}
	}
	w.Octet(o)
}

// ReadMethod decodes a method frame's payload: ids, then arguments. It
// returns an error wrapping ErrMalformed for unknown ids, short or
// trailing bytes.
func ReadMethod(payload []byte) (Method, error) {
	r := NewReader(payload)
	cid, mid := r.Short(), r.Short()
	if r.Err() != nil {
		return nil, r.Err()
	}
	m := NewMethod(cid, mid)
	if m == nil {
		return nil, fmt.Errorf("%w: unknown method %d.%d", ErrMalformed, cid, mid)
	}
	if err := m.Read(r); err != nil {
		return nil, fmt.Errorf("%s: %w", m.Name(), err)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%w: %s: %d trailing bytes", ErrMalformed, m.Name(), r.Len())
	}
	return m, nil
}

// AppendMethod appends m's payload (ids and arguments) to dst.
func AppendMethod(dst []byte, m Method) []byte {
	cid, mid := m.ID()
	w := Writer{Buf: dst}
	w.Short(cid)
	w.Short(mid)
	m.Write(&w)
	return w.Buf
}

// Header is a content header frame's payload.
type Header struct {
	ClassID  uint16
	BodySize uint64
	Props    BasicProperties
	// Raw is the property flags and properties as received, kept so that a
	// delivery re-sends them byte for byte.
	Raw []byte
}

// ReadHeader decodes a content header payload.
func ReadHeader(payload []byte) (Header, error) {
	r := NewReader(payload)
	h := Header{ClassID: r.Short()}
	if w := r.Short(); w != 0 && r.Err() == nil {
		return h, fmt.Errorf("%w: content header weight %d", ErrMalformed, w)
	}
	h.BodySize = r.LongLong()
	if err := r.Err(); err != nil {
		return h, err
	}
	if h.ClassID != ClassBasic {
		return h, fmt.Errorf("%w: content header of class %d", ErrMalformed, h.ClassID)
	}
	h.Raw = append([]byte{}, r.buf...)
	if err := h.Props.Read(r); err != nil {
		return h, err
	}
	if r.Len() != 0 {
		return h, fmt.Errorf("%w: content header: %d trailing bytes", ErrMalformed, r.Len())
	}
	return h, nil
}

// AppendHeader appends a content header payload with the raw properties.
func AppendHeader(dst []byte, bodySize uint64, rawProps []byte) []byte {
	w := Writer{Buf: dst}
	w.Short(ClassBasic)
	w.Short(0)
	w.LongLong(bodySize)
	return append(w.Buf, rawProps...)
}
