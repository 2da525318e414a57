package message

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"time"
)

// ErrBadMsgID is returned (wrapped) by ParseOffsetMsgID.
var ErrBadMsgID = errors.New("message: bad offset message id")

// Offset message id lengths in hex characters: IPv4 or IPv6 store host, then
// port int32 and CommitLog offset int64.
const (
	OffsetMsgIDLenV4 = 2 * (4 + 4 + 8)
	OffsetMsgIDLenV6 = 2 * (16 + 4 + 8)
)

const upperHex = "0123456789ABCDEF"

// appendUpperHex appends the uppercase hex form of b to dst.
func appendUpperHex(dst, b []byte) []byte {
	for _, c := range b {
		dst = append(dst, upperHex[c>>4], upperHex[c&0xF])
	}
	return dst
}

// OffsetMsgID is the offset message ID: uppercase hex of store IP (4 or 16
// bytes), port (int32) and CommitLog offset (int64). An IPv4-mapped IPv6
// address is written in the 4-byte form, as in stored records.
func OffsetMsgID(storeHost netip.AddrPort, physOffset int64) string {
	var raw [16 + 4 + 8]byte
	b := appendHost(raw[:0], storeHost)
	b = binary.BigEndian.AppendUint64(b, uint64(physOffset))
	var out [OffsetMsgIDLenV6]byte
	return string(appendUpperHex(out[:0], b))
}

// ParseOffsetMsgID reverses OffsetMsgID (32 or 56 hex characters, either
// case). An IPv4-mapped address in a 56-character id is returned unmapped.
func ParseOffsetMsgID(id string) (netip.AddrPort, int64, error) {
	if len(id) != OffsetMsgIDLenV4 && len(id) != OffsetMsgIDLenV6 {
		return netip.AddrPort{}, 0, fmt.Errorf("%w: %q is %d characters, want %d or %d",
			ErrBadMsgID, id, len(id), OffsetMsgIDLenV4, OffsetMsgIDLenV6)
	}
	var raw [16 + 4 + 8]byte
	b := raw[:len(id)/2]
	if _, err := hex.Decode(b, []byte(id)); err != nil {
		return netip.AddrPort{}, 0, fmt.Errorf("%w: %q: %v", ErrBadMsgID, id, err)
	}
	ipLen := len(b) - 12
	addr, _ := netip.AddrFromSlice(b[:ipLen])
	port := int32(binary.BigEndian.Uint32(b[ipLen:]))
	offset := int64(binary.BigEndian.Uint64(b[ipLen+4:]))
	if port < 0 || port > maxPort {
		return netip.AddrPort{}, 0, fmt.Errorf("%w: %q: port %d", ErrBadMsgID, id, port)
	}
	if offset < 0 {
		return netip.AddrPort{}, 0, fmt.Errorf("%w: %q: offset %d", ErrBadMsgID, id, offset)
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), offset, nil
}

// UniqIDGenerator makes UNIQ_KEY values for messages that arrive without one,
// in the layout of the Java client's MessageClientIDSetter, all uppercase hex:
//
//	ip (4 or 16 bytes) | pid int16 | random int32 | ms since month start int32 | counter int16
//
// The random part (Java's class loader hash) keeps two processes with the same
// ip and pid apart. It is safe for concurrent use.
type UniqIDGenerator struct {
	prefix  []byte // hex of ip | pid | random
	counter atomic.Uint32
	now     func() time.Time
	month   atomic.Pointer[monthWindow]
}

// monthWindow is the current calendar month in Unix ms (local time, as Java).
type monthWindow struct{ startMs, endMs int64 }

// NewUniqIDGenerator returns a generator prefixed with ip and the process id.
// An invalid ip is replaced by random bytes.
func NewUniqIDGenerator(ip netip.Addr) *UniqIDGenerator {
	return newUniqIDGenerator(ip, int16(os.Getpid()), time.Now)
}

func newUniqIDGenerator(ip netip.Addr, pid int16, now func() time.Time) *UniqIDGenerator {
	var raw [16 + 2 + 4]byte
	var b []byte
	switch ip = ip.Unmap(); {
	case ip.Is4():
		a := ip.As4()
		b = append(raw[:0], a[:]...)
	case ip.Is6():
		a := ip.As16()
		b = append(raw[:0], a[:]...)
	default:
		b = raw[:4]
		_, _ = rand.Read(b) // crypto/rand.Read never fails
	}
	b = binary.BigEndian.AppendUint16(b, uint16(pid))
	b = b[:len(b)+4]
	_, _ = rand.Read(b[len(b)-4:])
	g := &UniqIDGenerator{prefix: appendUpperHex(nil, b), now: now}
	var c [2]byte
	_, _ = rand.Read(c[:])
	g.counter.Store(uint32(binary.BigEndian.Uint16(c[:])))
	return g
}

// Next returns a new unique ID (32 hex characters for an IPv4 ip).
func (g *UniqIDGenerator) Next() string {
	nowMs := g.now().UnixMilli()
	w := g.window(nowMs)
	var tail [6]byte
	binary.BigEndian.PutUint32(tail[:], uint32(nowMs-w.startMs))
	binary.BigEndian.PutUint16(tail[4:], uint16(g.counter.Add(1)))
	var out [2 * (16 + 2 + 4 + 6)]byte
	b := append(out[:0], g.prefix...)
	return string(appendUpperHex(b, tail[:]))
}

// window returns the month containing nowMs, recomputing it when nowMs left
// the cached one (in either direction, so a clock step back is handled).
// Concurrent callers may recompute it at the same time; they store equal values.
func (g *UniqIDGenerator) window(nowMs int64) *monthWindow {
	if w := g.month.Load(); w != nil && nowMs >= w.startMs && nowMs < w.endMs {
		return w
	}
	t := time.UnixMilli(nowMs).In(time.Local)
	start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.Local)
	w := &monthWindow{startMs: start.UnixMilli(), endMs: start.AddDate(0, 1, 0).UnixMilli()}
	g.month.Store(w)
	return w
}
