package remoting

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
)

// DefaultMaxFrameBytes is the default frame limit (Java's frameMaxLength):
// the length field of a frame may not exceed it.
const DefaultMaxFrameBytes = 16 << 20

// maxHeaderBytes is the largest header the 24-bit length can describe.
const maxHeaderBytes = 1<<24 - 1

// MaxExtFields bounds the ext fields of one header (JSON or ROCKETMQ),
// counted as they appear on the wire (a repeated or null field counts each
// time): a decoded field costs a map slot, tens of bytes, for as few as 6
// bytes of header, so without a bound a 16 MiB frame decodes to hundreds of
// MiB. RocketMQ's own request headers have at most about 25 fields (a send
// with every RocketMQ 5 RPC field and the three ACL fields), the official
// clients' fewer.
const MaxExtFields = 256

// maxJSONHeaderKeys bounds the top-level keys of a JSON header; RocketMQ's
// has eight (code, language, version, opaque, flag, remark, extFields,
// serializeTypeCurrentRPC).
const maxJSONHeaderKeys = 64

// readChunkBytes is how much buffer a frame read allocates before more of
// the frame has arrived; the buffer then doubles as data comes in, so a
// peer that claims a large frame and sends little costs little memory.
const readChunkBytes = 64 << 10

var (
	// ErrFrameTooLarge: a frame's length exceeds the configured maximum.
	ErrFrameTooLarge = errors.New("remoting: frame too large")
	// ErrBadFrame: a frame's length fields are inconsistent.
	ErrBadFrame = errors.New("remoting: malformed frame")
	// ErrBadHeader: a header could not be decoded.
	ErrBadHeader = errors.New("remoting: malformed header")
	// ErrHeaderLimit: a header has more fields than MaxExtFields (or a
	// JSON header more keys than maxJSONHeaderKeys).
	ErrHeaderLimit = errors.New("remoting: header over a decoding limit")
	// ErrHTTPPeer: the peer answered in HTTP ("HTTP/1.1 400 ..." where a
	// frame length belongs): it is an HTTP server, not a remoting one.
	ErrHTTPPeer = errors.New("remoting: the peer answered in HTTP: it is an HTTP server, not a RocketMQ remoting server")
	// ErrAMQPPeer: the peer answered with the AMQP protocol header
	// ("AMQP\x00\x00\x09\x01", what an AMQP 0-9-1 server sends a client
	// whose greeting it does not accept): it is an AMQP listener.
	ErrAMQPPeer = errors.New("remoting: the peer answered with the AMQP protocol header: it is an AMQP listener, not a RocketMQ remoting server")
)

// EncodeFrame appends the whole frame of c (length field included) to dst,
// encoding the header in c.SerializeType.
func EncodeFrame(dst []byte, c *Command) ([]byte, error) {
	dst, err := appendFrameHead(dst, c)
	if err != nil {
		return nil, err
	}
	dst = append(dst, c.Body...)
	for _, p := range c.BodyParts {
		dst = append(dst, p...)
	}
	return dst, nil
}

// appendFrameHead appends everything of c's frame except the body; the
// length field already counts the body (Body and BodyParts), which the
// caller writes next.
func appendFrameHead(dst []byte, c *Command) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	var err error
	switch c.SerializeType {
	case SerializeJSON:
		dst = appendJSONHeader(dst, c)
	case SerializeRocketMQ:
		dst, err = appendBinaryHeader(dst, c)
	default:
		err = fmt.Errorf("%w: unknown serialize type %d", ErrBadHeader, c.SerializeType)
	}
	if err != nil {
		return nil, err
	}
	hdrLen := len(dst) - start - 8
	if hdrLen > maxHeaderBytes {
		return nil, fmt.Errorf("%w: header of %d bytes exceeds the 24-bit limit", ErrFrameTooLarge, hdrLen)
	}
	length := 4 + int64(hdrLen) + int64(c.BodyLen())
	if length > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, length)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(length))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(c.SerializeType)<<24|uint32(hdrLen))
	return dst, nil
}

// DecodeFrame decodes one whole frame, length field included. The
// command's Body aliases frame.
func DecodeFrame(frame []byte) (*Command, error) {
	if len(frame) < 4 {
		return nil, fmt.Errorf("%w: %d bytes is shorter than the length field", ErrBadFrame, len(frame))
	}
	n := binary.BigEndian.Uint32(frame)
	if uint64(n) != uint64(len(frame)-4) {
		return nil, fmt.Errorf("%w: length field %d but %d bytes follow", ErrBadFrame, n, len(frame)-4)
	}
	return decodePayload(frame[4:])
}

// decodePayload decodes a frame without its length field: the
// header-length word, the header and the body. Body aliases p.
func decodePayload(p []byte) (*Command, error) { return decodePayloadFor(p, nil) }

// decodePayloadFor is decodePayload for a connection whose handler may
// list request codes whose JSON ext fields stay a list (ExtLister).
func decodePayloadFor(p []byte, lister ExtLister) (*Command, error) {
	if len(p) < 4 {
		return nil, fmt.Errorf("%w: frame length %d is shorter than the header-length word", ErrBadFrame, len(p))
	}
	word := binary.BigEndian.Uint32(p)
	serType, hdrLen := byte(word>>24), int(word&maxHeaderBytes)
	p = p[4:]
	if hdrLen > len(p) {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d bytes in the frame", ErrBadFrame, hdrLen, len(p))
	}
	var c *Command
	var err error
	switch serType {
	case SerializeJSON:
		c, err = decodeJSONHeader(p[:hdrLen], lister)
	case SerializeRocketMQ:
		c, err = decodeBinaryHeader(p[:hdrLen])
	default:
		err = fmt.Errorf("%w: unknown serialize type %d", ErrBadHeader, serType)
	}
	if err != nil {
		return nil, err
	}
	if body := p[hdrLen:]; len(body) > 0 {
		c.Body = body
	}
	return c, nil
}

// readPayload reads one frame from r and returns it without its length
// field, in a buffer of its own (never pooled).
func readPayload(r io.Reader, maxBytes int) ([]byte, error) {
	return readFrame(r, maxBytes, false, false)
}

// readFrame reads one frame from r and returns it without its length
// field. A length above maxBytes fails with ErrFrameTooLarge before any
// buffer is allocated; otherwise the buffer grows only as bytes arrive.
// With poolable set, a frame up to maxPooledFrame is read into a buffer
// whose capacity is its size class: one from framePool when there is one,
// else a new one (grown as bytes arrive if it is larger than a read
// chunk), which framePool can take back later. With trustLength set, a
// frame that is not pooled is allocated at its full length at once.
func readFrame(r io.Reader, maxBytes int, poolable, trustLength bool) ([]byte, error) {
	var lenBuf [4]byte
	if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
		return nil, err
	}
	n := int64(binary.BigEndian.Uint32(lenBuf[:]))
	if n > int64(maxBytes) || n > math.MaxInt32 {
		switch string(lenBuf[:]) {
		case "HTTP":
			return nil, ErrHTTPPeer
		case "AMQP":
			return nil, ErrAMQPPeer
		}
		return nil, fmt.Errorf("%w: length %d exceeds the limit of %d bytes", ErrFrameTooLarge, int32(n), maxBytes)
	}
	if n < 4 {
		return nil, fmt.Errorf("%w: length %d is shorter than the header-length word", ErrBadFrame, n)
	}
	target := int(n) // the capacity the buffer ends with
	var buf []byte
	if poolable {
		if _, size, ok := frameClass(int(n)); ok {
			target = size
			buf = frames.get(int(n))
		}
	}
	if buf == nil && trustLength {
		buf = make([]byte, 0, target)
	}
	if buf == nil {
		buf = make([]byte, 0, min(target, readChunkBytes))
	}
	for len(buf) < int(n) {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(target, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		m, err := r.Read(buf[len(buf):min(cap(buf), int(n))])
		buf = buf[:len(buf)+m]
		if err != nil && len(buf) < int(n) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			if poolable {
				frames.put(buf)
			}
			return nil, err
		}
	}
	return buf, nil
}
