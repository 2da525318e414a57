package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame types and framing limits.
const (
	FrameHeaderBytes = 7
	// FrameOverheadBytes is a frame's bytes beyond its payload: header and end.
	FrameOverheadBytes = FrameHeaderBytes + 1
)

// ProtocolHeader is what a 0-9-1 client sends first and what the server
// answers a client asking for another version with.
var ProtocolHeader = []byte{'A', 'M', 'Q', 'P', 0, 0, 9, 1}

// Frame is one frame; Payload aliases the reader's buffer until the next
// ReadFrame.
type Frame struct {
	Type    uint8
	Channel uint16
	Payload []byte
}

// ErrFrameTooLarge is wrapped when a frame is larger than allowed.
var ErrFrameTooLarge = errors.New("amqp: frame too large")

// FrameReader reads frames of at most maxBytes (payload and overhead).
type FrameReader struct {
	r   io.Reader
	hdr [FrameHeaderBytes]byte
	buf []byte
}

// NewFrameReader reads frames from r.
func NewFrameReader(r io.Reader) *FrameReader { return &FrameReader{r: r} }

// ReadFrame reads the next frame. A frame larger than maxBytes is
// refused before its payload is read (ErrFrameTooLarge); a wrong end byte
// or an unknown type is ErrMalformed; I/O errors are returned as they are.
func (fr *FrameReader) ReadFrame(maxBytes uint32) (Frame, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return Frame{}, err
	}
	f := Frame{Type: fr.hdr[0], Channel: binary.BigEndian.Uint16(fr.hdr[1:])}
	size := binary.BigEndian.Uint32(fr.hdr[3:])
	switch f.Type {
	case FrameMethod, FrameHeader, FrameBody, FrameHeartbeat:
	default:
		return f, fmt.Errorf("%w: frame type %d", ErrMalformed, f.Type)
	}
	if uint64(size)+FrameOverheadBytes > uint64(maxBytes) {
		return f, fmt.Errorf("%w: %d payload bytes, frame-max %d", ErrFrameTooLarge, size, maxBytes)
	}
	n := int(size) + 1
	if cap(fr.buf) < n {
		fr.buf = make([]byte, n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		return f, err
	}
	if b[size] != FrameEnd {
		return f, fmt.Errorf("%w: frame end byte %#x", ErrMalformed, b[size])
	}
	f.Payload = b[:size]
	return f, nil
}

// AppendFrame appends a frame of type t on channel ch with payload p.
func AppendFrame(dst []byte, t uint8, ch uint16, p []byte) []byte {
	dst = append(dst, t)
	dst = binary.BigEndian.AppendUint16(dst, ch)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(p)))
	dst = append(dst, p...)
	return append(dst, FrameEnd)
}

// AppendMethodFrame appends a method frame for m on channel ch.
func AppendMethodFrame(dst []byte, ch uint16, m Method) []byte {
	at := len(dst)
	dst = append(dst, FrameMethod, byte(ch>>8), byte(ch), 0, 0, 0, 0)
	dst = AppendMethod(dst, m)
	binary.BigEndian.PutUint32(dst[at+3:], uint32(len(dst)-at-FrameHeaderBytes))
	return append(dst, FrameEnd)
}

// AppendDeliverFrame is AppendMethodFrame for basic.deliver, the method a
// queue sends per message: called on the concrete type, the method and
// the writer stay on the caller's stack (through the Method interface
// both are allocated).
func AppendDeliverFrame(dst []byte, ch uint16, m *BasicDeliver) []byte {
	at := len(dst)
	dst = append(dst, FrameMethod, byte(ch>>8), byte(ch), 0, 0, 0, 0)
	w := Writer{Buf: dst}
	cid, mid := m.ID()
	w.Short(cid)
	w.Short(mid)
	m.Write(&w)
	dst = w.Buf
	binary.BigEndian.PutUint32(dst[at+3:], uint32(len(dst)-at-FrameHeaderBytes))
	return append(dst, FrameEnd)
}
