package translate

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// AMQP 0-9-1 basic-class content properties, as an AMQP record keeps them
// (the property flags and the present properties, as the publisher sent
// them). Flag bits, from bit 15 down: content-type, content-encoding,
// headers, delivery-mode, priority, correlation-id, reply-to, expiration,
// message-id, timestamp, type, user-id, app-id, cluster-id; bit 0 says
// another flag word follows.
const (
	flagContentType     = 1 << 15
	flagContentEncoding = 1 << 14
	flagHeaders         = 1 << 13
	flagDeliveryMode    = 1 << 12
	flagPriority        = 1 << 11
	flagCorrelationID   = 1 << 10
	flagReplyTo         = 1 << 9
	flagExpiration      = 1 << 8
	flagMessageID       = 1 << 7
	flagTimestamp       = 1 << 6
	flagType            = 1 << 5
	flagUserID          = 1 << 4
	flagAppID           = 1 << 3
	flagClusterID       = 1 << 2
)

// AMQPProperties are the basic-class properties Keel maps. Strings are
// empty and the numbers zero when absent (Has says which are present).
type AMQPProperties struct {
	Has             uint16 // the flag bits of the present properties
	ContentType     string
	ContentEncoding string
	Headers         []Header // field-table entries, values as text (see tableText)
	DeliveryMode    uint8
	Priority        uint8
	CorrelationID   string
	ReplyTo         string
	Expiration      string
	MessageID       string
	Timestamp       uint64 // seconds
	Type            string
	UserID          string
	AppID           string
	ClusterID       string
}

// maxTableDepth bounds nested tables and arrays in a headers table.
const maxTableDepth = 16

// ParseAMQPProperties decodes raw content properties. Header values are
// rendered as text: long and short strings and byte arrays as their
// bytes, numbers in decimal, booleans as true/false, timestamps as
// seconds, decimals as their value; nested tables, arrays and voids are
// dropped. It never panics.
func ParseAMQPProperties(raw []byte) (AMQPProperties, error) {
	var p AMQPProperties
	if len(raw) == 0 {
		return p, nil // no property flags at all: none present
	}
	r := amqpReader{b: raw}
	flags := r.u16()
	for w := flags; w&1 != 0 && r.err == nil; {
		w = r.u16() // continuation words: no property Keel knows
	}
	p.Has = flags &^ 1
	if flags&flagContentType != 0 {
		p.ContentType = r.shortStr()
	}
	if flags&flagContentEncoding != 0 {
		p.ContentEncoding = r.shortStr()
	}
	if flags&flagHeaders != 0 {
		p.Headers = r.table(p.Headers, 0)
	}
	if flags&flagDeliveryMode != 0 {
		p.DeliveryMode = r.u8()
	}
	if flags&flagPriority != 0 {
		p.Priority = r.u8()
	}
	if flags&flagCorrelationID != 0 {
		p.CorrelationID = r.shortStr()
	}
	if flags&flagReplyTo != 0 {
		p.ReplyTo = r.shortStr()
	}
	if flags&flagExpiration != 0 {
		p.Expiration = r.shortStr()
	}
	if flags&flagMessageID != 0 {
		p.MessageID = r.shortStr()
	}
	if flags&flagTimestamp != 0 {
		p.Timestamp = r.u64()
	}
	if flags&flagType != 0 {
		p.Type = r.shortStr()
	}
	if flags&flagUserID != 0 {
		p.UserID = r.shortStr()
	}
	if flags&flagAppID != 0 {
		p.AppID = r.shortStr()
	}
	if flags&flagClusterID != 0 {
		p.ClusterID = r.shortStr()
	}
	if r.err != nil {
		return p, fmt.Errorf("%w: AMQP properties: %v", ErrMalformed, r.err)
	}
	return p, nil
}

// AppendAMQPProperties encodes p's present properties (p.Has) as raw
// content properties; header values are written as long strings. A
// string longer than 255 bytes is cut to 255 (short strings).
func AppendAMQPProperties(dst []byte, p *AMQPProperties) []byte {
	has := p.Has &^ 1
	if len(p.Headers) > 0 {
		has |= flagHeaders
	}
	dst = binary.BigEndian.AppendUint16(dst, has)
	if has&flagContentType != 0 {
		dst = appendShortStr(dst, p.ContentType)
	}
	if has&flagContentEncoding != 0 {
		dst = appendShortStr(dst, p.ContentEncoding)
	}
	if has&flagHeaders != 0 {
		at := len(dst)
		dst = binary.BigEndian.AppendUint32(dst, 0)
		for _, h := range p.Headers {
			dst = appendShortStr(dst, h.Key)
			dst = append(dst, 'S')
			dst = binary.BigEndian.AppendUint32(dst, uint32(len(h.Value)))
			dst = append(dst, h.Value...)
		}
		binary.BigEndian.PutUint32(dst[at:], uint32(len(dst)-at-4))
	}
	if has&flagDeliveryMode != 0 {
		dst = append(dst, p.DeliveryMode)
	}
	if has&flagPriority != 0 {
		dst = append(dst, p.Priority)
	}
	for _, f := range []struct {
		bit uint16
		s   string
	}{{flagCorrelationID, p.CorrelationID}, {flagReplyTo, p.ReplyTo}, {flagExpiration, p.Expiration}, {flagMessageID, p.MessageID}} {
		if has&f.bit != 0 {
			dst = appendShortStr(dst, f.s)
		}
	}
	if has&flagTimestamp != 0 {
		dst = binary.BigEndian.AppendUint64(dst, p.Timestamp)
	}
	for _, f := range []struct {
		bit uint16
		s   string
	}{{flagType, p.Type}, {flagUserID, p.UserID}, {flagAppID, p.AppID}, {flagClusterID, p.ClusterID}} {
		if has&f.bit != 0 {
			dst = appendShortStr(dst, f.s)
		}
	}
	return dst
}

func appendShortStr(dst []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	dst = append(dst, byte(len(s)))
	return append(dst, s...)
}

// amqpReader reads AMQP's big-endian fields; the first error sticks.
type amqpReader struct {
	b   []byte
	err error
}

func (r *amqpReader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("field of %d bytes, %d left", n, len(r.b))
		r.b = nil
		return nil
	}
	v := r.b[:n:n]
	r.b = r.b[n:]
	return v
}

func (r *amqpReader) u8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *amqpReader) u16() uint16 {
	if b := r.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (r *amqpReader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *amqpReader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (r *amqpReader) shortStr() string { return string(r.take(int(r.u8()))) }

func (r *amqpReader) longStr() []byte {
	n := r.u32()
	if uint64(n) > uint64(len(r.b)) {
		r.take(len(r.b) + 1)
		return nil
	}
	return r.take(int(n))
}

// table reads a field table, appending its entries rendered as text to
// out (nested tables and arrays are read and dropped).
func (r *amqpReader) table(out []Header, depth int) []Header {
	body := r.longStr()
	if r.err != nil {
		return out
	}
	if depth > maxTableDepth {
		r.err = fmt.Errorf("field tables nested deeper than %d", maxTableDepth)
		return out
	}
	t := amqpReader{b: body}
	for len(t.b) > 0 && t.err == nil {
		k := t.shortStr()
		v, ok := t.value(depth)
		if ok && t.err == nil {
			out = append(out, Header{Key: k, Value: v})
		}
	}
	if t.err != nil {
		r.err = t.err
	}
	return out
}

// value reads one typed field value (RabbitMQ's type codes) and renders
// it as text; ok is false for the values that have none.
func (r *amqpReader) value(depth int) ([]byte, bool) {
	code := r.u8()
	if r.err != nil {
		return nil, false
	}
	var text string
	switch code {
	case 't':
		text = strconv.FormatBool(r.u8() != 0)
	case 'b':
		text = strconv.Itoa(int(int8(r.u8())))
	case 'B':
		text = strconv.Itoa(int(r.u8()))
	case 's':
		text = strconv.Itoa(int(int16(r.u16())))
	case 'u':
		text = strconv.Itoa(int(r.u16()))
	case 'I':
		text = strconv.Itoa(int(int32(r.u32())))
	case 'i':
		text = strconv.FormatUint(uint64(r.u32()), 10)
	case 'l':
		text = strconv.FormatInt(int64(r.u64()), 10)
	case 'T':
		text = strconv.FormatUint(r.u64(), 10)
	case 'f':
		text = strconv.FormatFloat(float64(math.Float32frombits(r.u32())), 'g', -1, 32)
	case 'd':
		text = strconv.FormatFloat(math.Float64frombits(r.u64()), 'g', -1, 64)
	case 'D':
		scale := r.u8()
		v := int32(r.u32())
		text = decimalText(v, scale)
	case 'S', 'x':
		v := r.longStr()
		if v == nil {
			v = []byte{}
		}
		return v, r.err == nil
	case 'A':
		if depth+1 > maxTableDepth {
			r.err = fmt.Errorf("field arrays nested deeper than %d", maxTableDepth)
			return nil, false
		}
		a := amqpReader{b: r.longStr()}
		for len(a.b) > 0 && a.err == nil {
			a.value(depth + 1)
		}
		if a.err != nil && r.err == nil {
			r.err = a.err
		}
		return nil, false
	case 'F':
		r.table(nil, depth+1) // read and dropped
		return nil, false
	case 'V':
		return nil, false
	default:
		r.err = fmt.Errorf("field table type code %q", code)
		return nil, false
	}
	return []byte(text), r.err == nil
}

// decimalText renders an AMQP decimal (value × 10^-scale).
func decimalText(v int32, scale uint8) string {
	s := strconv.FormatInt(int64(v), 10)
	if scale == 0 {
		return s
	}
	neg := v < 0
	if neg {
		s = s[1:]
	}
	for len(s) <= int(scale) {
		s = "0" + s
	}
	s = s[:len(s)-int(scale)] + "." + s[len(s)-int(scale):]
	if neg {
		s = "-" + s
	}
	return s
}
