package remoting

import "unicode/utf8"

// The fast JSON header decoder: what the clients write, decoded in one
// pass with no general object walk. The Go client (jsoniter) writes
//
//	{"code":310,"language":"GO","version":317,"opaque":7,"flag":0,"remark":"","extFields":{"a":"g",...}}
//
// and the Java client (fastjson) the same keys sorted, without remark and
// with "serializeTypeCurrentRPC":"JSON". fastJSONHeader accepts exactly
// that shape: no white space; each known key at most once; code, version,
// opaque and flag plain integers in range; language and remark strings
// (remark may be null); extFields an object (or null) of at most
// maxStackExtFields string values under distinct keys without escapes;
// other keys with a string or integer value, ignored. On anything else it
// reports false and keeps nothing: decodeJSONHeader then decodes the header
// with the general walk, whose result equals this one on every header this
// accepts (TestFastJSONHeaderAgrees, FuzzFastJSONHeader).

// fastPlain[b] is whether byte b stands for itself inside a JSON string:
// printable ASCII other than the quote and the backslash.
var fastPlain = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// Commands decoded with their listed ext fields in the same allocation,
// one type per size class of the list.
type (
	commandExt4 struct {
		cmd Command
		ext [4]extPair
	}
	commandExt8 struct {
		cmd Command
		ext [8]extPair
	}
	commandExt16 struct {
		cmd Command
		ext [16]extPair
	}
	commandExt32 struct {
		cmd Command
		ext [maxStackExtFields]extPair
	}
)

// fastJSONHeader decodes data if it has the shape described above; the
// ext fields become a list or a map as in decodeJSONHeader.
func fastJSONHeader(data []byte, lister ExtLister) (*Command, bool) {
	if len(data) > precountHeaderBytes {
		return nil, false
	}
	d := jsonDecoder{data: data}
	if !d.fastByte('{') {
		return nil, false
	}
	d.src = string(data) // the one copy backing every plain string
	c := Command{SerializeType: SerializeJSON}
	var fields [maxStackExtFields]extPair
	n := -1 // ext fields decoded; -1 while extFields is absent or null
	var seen uint8
	keys := 0
	if d.fastByte('}') {
		if d.pos != len(data) {
			return nil, false
		}
		return d.fastDone(&c, nil, lister)
	}
	for {
		key, ok := d.fastKey()
		if !ok {
			return nil, false
		}
		if keys++; keys > maxJSONHeaderKeys {
			return nil, false
		}
		k := headerKeyIndex(key)
		if k >= 0 {
			if seen&(1<<k) != 0 {
				return nil, false
			}
			seen |= 1 << k
		}
		var v int64
		switch k {
		case 0:
			v, ok = d.fastInt(16)
			c.Code = int16(v)
		case 1:
			v, ok = d.fastInt(16)
			c.Version = int16(v)
		case 2:
			v, ok = d.fastInt(32)
			c.Opaque = int32(v)
		case 3:
			v, ok = d.fastInt(32)
			c.Flag = int32(v)
		case 4:
			c.Language, ok = d.fastString()
		case 5:
			if !d.fastNull() {
				c.Remark, ok = d.fastString()
			}
		case 6:
			n = -1
			if !d.fastNull() {
				n, ok = d.fastExtFields(&fields)
			}
		default:
			if _, ok = d.fastString(); !ok {
				_, ok = d.fastInt(64)
			}
		}
		if !ok {
			return nil, false
		}
		if d.fastByte(',') {
			continue
		}
		if d.fastByte('}') {
			break
		}
		return nil, false
	}
	if d.pos != len(data) {
		return nil, false
	}
	if n < 0 {
		return d.fastDone(&c, nil, lister)
	}
	return d.fastDone(&c, fields[:n], lister)
}

// fastDone returns the decoded command with its ext fields (nil when the
// header had none): as a list sharing the command's allocation when lister
// lists its code, else as a map.
func (d *jsonDecoder) fastDone(c *Command, ext []extPair, lister ExtLister) (*Command, bool) {
	if ext == nil {
		out := new(Command)
		*out = *c
		return out, true
	}
	if lister == nil || c.IsResponse() || !lister.ListsExt(c.Code) {
		out := new(Command)
		*out = *c
		out.ExtFields = make(map[string]string, len(ext))
		for _, f := range ext {
			out.ExtFields[f.key] = f.value
		}
		return out, true
	}
	var out *Command
	var list []extPair
	switch n := len(ext); {
	case n <= 4:
		p := &commandExt4{cmd: *c}
		out, list = &p.cmd, p.ext[:n:n]
	case n <= 8:
		p := &commandExt8{cmd: *c}
		out, list = &p.cmd, p.ext[:n:n]
	case n <= 16:
		p := &commandExt16{cmd: *c}
		out, list = &p.cmd, p.ext[:n:n]
	default:
		p := &commandExt32{cmd: *c}
		out, list = &p.cmd, p.ext[:n:n]
	}
	copy(list, ext)
	out.ext = list
	return out, true
}

// fastByte consumes b if it is next.
func (d *jsonDecoder) fastByte(b byte) bool {
	if d.pos < len(d.data) && d.data[d.pos] == b {
		d.pos++
		return true
	}
	return false
}

// fastNull consumes null if it is next.
func (d *jsonDecoder) fastNull() bool {
	if len(d.data)-d.pos >= 4 && string(d.data[d.pos:d.pos+4]) == "null" {
		d.pos += 4
		return true
	}
	return false
}

// fastKey reads an object key without escapes and the colon after it.
func (d *jsonDecoder) fastKey() ([]byte, bool) {
	if !d.fastByte('"') {
		return nil, false
	}
	start := d.pos
	i := start
	for i < len(d.data) && fastPlain[d.data[i]] {
		i++
	}
	if len(d.data)-i < 2 || d.data[i] != '"' || d.data[i+1] != ':' {
		return nil, false
	}
	d.pos = i + 2
	return d.data[start:i], true
}

// fastString reads a string; one with escapes, control characters or
// bytes beyond ASCII is decoded by slowString, as stringBytes would.
func (d *jsonDecoder) fastString() (string, bool) {
	if d.pos >= len(d.data) || d.data[d.pos] != '"' {
		return "", false
	}
	start := d.pos + 1
	i := start
	for i < len(d.data) && fastPlain[d.data[i]] {
		i++
	}
	if i < len(d.data) && d.data[i] == '"' {
		d.pos = i + 1
		return d.src[start:i], true
	}
	d.pos = i
	b, err := d.slowString(start)
	if err != nil {
		return "", false
	}
	return d.lastString(b), true
}

// fastInt reads an integer without fraction, exponent or leading zeros
// that fits in bits.
func (d *jsonDecoder) fastInt(bits uint) (int64, bool) {
	i := d.pos
	neg := i < len(d.data) && d.data[i] == '-'
	if neg {
		i++
	}
	start := i
	var v int64
	for i < len(d.data) && d.data[i]-'0' <= 9 && i-start < 18 {
		v = v*10 + int64(d.data[i]-'0')
		i++
	}
	if i == start || (i-start > 1 && d.data[start] == '0') {
		return 0, false
	}
	if i < len(d.data) {
		if b := d.data[i]; b-'0' <= 9 || b == '.' || b == 'e' || b == 'E' {
			return 0, false // too long for this loop, or not an integer
		}
	}
	if neg {
		v = -v
	}
	if lim := int64(1) << (bits - 1); bits < 64 && (v < -lim || v >= lim) {
		return 0, false
	}
	d.pos = i
	return v, true
}

// fastExtFields reads the extFields object into fields and returns how
// many it holds; a repeated key, a value other than a string or more
// fields than fields holds fail it.
func (d *jsonDecoder) fastExtFields(fields *[maxStackExtFields]extPair) (int, bool) {
	if !d.fastByte('{') {
		return 0, false
	}
	if d.fastByte('}') {
		return 0, true
	}
	var classes uint64 // a bit per key class (keyClass) met so far
	n := 0
	for {
		kb, ok := d.fastKey()
		if !ok || n == len(fields) {
			return 0, false
		}
		key := d.src[d.pos-2-len(kb) : d.pos-2]
		if bit := uint64(1) << keyClass(key); classes&bit != 0 {
			for _, f := range fields[:n] {
				if f.key == key {
					return 0, false
				}
			}
		} else {
			classes |= bit
		}
		v, ok := d.fastString()
		if !ok {
			return 0, false
		}
		fields[n] = extPair{key, v}
		n++
		if d.fastByte(',') {
			continue
		}
		if d.fastByte('}') {
			return n, true
		}
		return 0, false
	}
}
