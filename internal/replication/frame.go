package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Frames: len u32 | type u8 | payload | crc32c u32, big-endian. len counts
// the bytes after itself (type, payload and CRC); the CRC-32C covers the
// type and the payload. A replicated CommitLog range inside a DATA payload
// also carries every record's own CRC, which the replica checks before it
// writes.

// Frame types.
const (
	typeHello   byte = 1 // replica -> master: who it is, what it has
	typeHelloOK byte = 2 // master -> replica: accepted; the master's epoch history
	typeReject  byte = 3 // master -> replica: refused, with the reason
	typeData    byte = 4 // master -> replica: a raw CommitLog range (empty: heartbeat)
	typeAck     byte = 5 // replica -> master: written and flushed ends
)

const frameOverhead = 1 + 4 // type + CRC

// DefaultMaxFrameBytes bounds a frame (a DATA frame holds at most one
// chunk, or one record larger than a chunk).
const DefaultMaxFrameBytes = 64 << 20

// ErrMalformed: a frame or a message that does not decode. The connection
// is closed; nothing of it is used.
var ErrMalformed = errors.New("replication: malformed frame")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendFrame appends one frame of typ and payload to dst.
func appendFrame(dst []byte, typ byte, payload []byte) []byte {
	var h [5]byte
	binary.BigEndian.PutUint32(h[0:4], uint32(len(payload)+frameOverhead))
	h[4] = typ
	dst = append(dst, h[:]...)
	dst = append(dst, payload...)
	crc := crc32.Update(crc32.Checksum(h[4:5], castagnoli), castagnoli, payload)
	return binary.BigEndian.AppendUint32(dst, crc)
}

// frameChunkBytes is the most a frame read allocates before more of the
// frame has arrived: a buffer too small for a frame grows (doubling) as
// its bytes come in, so a peer that announces a large frame and sends
// little costs little memory.
const frameChunkBytes = 16 << 10

// readFrame reads one frame of at most max bytes (after the length) into
// buf (grown if needed) and returns its type and payload, which alias buf.
// Any frame that is too short, too long, of an unknown type or whose CRC
// does not match is an error wrapping ErrMalformed.
func readFrame(r *bufio.Reader, max int, buf []byte) (byte, []byte, []byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, buf, err
	}
	n := int64(binary.BigEndian.Uint32(h[:]))
	if n < frameOverhead || n > int64(max) {
		return 0, nil, buf, fmt.Errorf("%w: length %d outside [%d, %d]", ErrMalformed, n, frameOverhead, max)
	}
	b, err := readGrowing(r, int(n), buf)
	if err != nil {
		return 0, nil, buf, err
	}
	return decodeFrameBody(b, b[:cap(b)])
}

// readGrowing reads exactly n bytes into buf, or, when buf is too small,
// into a buffer that grows from frameChunkBytes as the bytes arrive.
func readGrowing(r io.Reader, n int, buf []byte) ([]byte, error) {
	if cap(buf) < n {
		buf = make([]byte, 0, min(n, max(cap(buf), frameChunkBytes)))
	}
	buf = buf[:0]
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, 2*cap(buf)))
			copy(grown, buf)
			buf = grown
		}
		m, err := io.ReadFull(r, buf[len(buf):min(cap(buf), n)])
		buf = buf[:len(buf)+m]
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return buf, nil
}

// decodeFrameBody checks the type and CRC of a frame body (what follows
// the length).
func decodeFrameBody(b, buf []byte) (byte, []byte, []byte, error) {
	typ, payload := b[0], b[1:len(b)-4]
	if got, want := crc32.Checksum(b[:len(b)-4], castagnoli), binary.BigEndian.Uint32(b[len(b)-4:]); got != want {
		return 0, nil, buf, fmt.Errorf("%w: crc %#08x, frame says %#08x", ErrMalformed, got, want)
	}
	if (typ < typeHello || typ > typeAck) && typ != typeOffsets && (typ < typeAuth || typ > typeAuthOK) {
		return 0, nil, buf, fmt.Errorf("%w: unknown type %d", ErrMalformed, typ)
	}
	return typ, payload, buf, nil
}
