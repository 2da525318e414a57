package wire

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
)

// Table is a field table; values are the Go types of the package
// documentation's type-code list.
type Table map[string]any

// Decimal is a field table's decimal value: Value / 10^Scale.
type Decimal struct {
	Scale uint8
	Value int32
}

// Timestamp is a field table's timestamp (seconds since the epoch).
type Timestamp uint64

// Binary is a field table's byte array ('x').
type Binary []byte

// MaxTableDepth bounds how deep tables and arrays nest.
const MaxTableDepth = 16

// What a field table may cost once decoded: TableAllocPerByte bytes of
// heap per byte of the table on the wire, plus TableAllocSlackBytes. A
// decoded value costs far more than its wire form (a table field of two
// bytes becomes a map slot and an interface, an array element of one byte
// a 16-byte interface), so without a bound a 128 KiB frame of void array
// elements decodes to 11 MiB. Every value decoded is charged an upper
// bound of its cost (the cost* constants) against the table's allowance,
// and a table that would exceed it is an ErrMalformed error (a connection
// exception: 502 SYNTAX_ERROR in a method, 501 FRAME_ERROR in a content
// header). Real tables cost about 4 bytes per wire byte (client
// properties, queue arguments, x-death headers: TestRealTablesDecode); the
// slack alone admits some 600 scalar fields.
const (
	TableAllocPerByte    = 8
	TableAllocSlackBytes = 64 << 10
)

// Upper bounds of the heap one decoded value costs (Go 1.26, amd64; the
// fuzz target FuzzDecode and TestTableDecodeCostBounded check that actual
// allocations stay within the allowance they imply).
const (
	costFieldBytes = 96  // a map slot as the map grows, with the key's bytes up to 16
	costElemBytes  = 32  // an array slot as the array grows
	costBoxBytes   = 8   // a boxed scalar
	costSliceBytes = 32  // a boxed byte slice, before its bytes
	costTableBytes = 160 // an empty map
	costArrayBytes = 32  // a boxed empty slice
)

// tableBudget is what is left of a table's allowance.
type tableBudget struct{ left, allowed int }

// charge takes n bytes of the allowance, failing r when it runs out.
func (r *Reader) charge(b *tableBudget, n int) bool {
	if b.left -= n; b.left >= 0 {
		return true
	}
	if r.err == nil {
		r.err = fmt.Errorf("%w: field table decodes to more than %d bytes of memory (%d per byte on the wire and %d)",
			ErrMalformed, b.allowed, TableAllocPerByte, TableAllocSlackBytes)
	}
	r.buf = nil
	return false
}

// Table reads a field table, within the allowance of the bytes it spans.
func (r *Reader) Table() Table {
	var b tableBudget
	if len(r.buf) >= 4 {
		n := min(int64(binary.BigEndian.Uint32(r.buf)), int64(len(r.buf)-4))
		b.allowed = TableAllocPerByte*int(4+n) + TableAllocSlackBytes
		b.left = b.allowed
	}
	return r.table(0, &b)
}

func (r *Reader) table(depth int, b *tableBudget) Table {
	n := r.Long()
	if r.err != nil {
		return nil
	}
	if depth >= MaxTableDepth {
		r.fail(fmt.Sprintf("table nested deeper than %d", MaxTableDepth), math.MaxInt32)
		return nil
	}
	buf := r.take(int(min(n, math.MaxInt32)), "table")
	if r.err != nil {
		return nil
	}
	// Counted first, so that the map is made at its size and charged for
	// before it is.
	fields := countValues(buf, true)
	if !r.charge(b, costTableBytes+fields*costFieldBytes) {
		return nil
	}
	t := make(Table, fields)
	sub := Reader{buf: buf}
	for sub.Len() > 0 && sub.err == nil {
		k := sub.ShortStr()
		if !sub.charge(b, len(k)) {
			break
		}
		v := sub.value(depth, b)
		if sub.err == nil {
			t[k] = v
		}
	}
	if sub.err != nil {
		r.err, r.buf = sub.err, nil
		return nil
	}
	return t
}

func (r *Reader) array(depth int, b *tableBudget) []any {
	n := r.Long()
	if depth >= MaxTableDepth {
		r.fail(fmt.Sprintf("array nested deeper than %d", MaxTableDepth), math.MaxInt32)
	}
	buf := r.take(int(min(n, math.MaxInt32)), "array")
	if r.err != nil {
		return nil
	}
	elems := countValues(buf, false)
	if !r.charge(b, costArrayBytes+elems*costElemBytes) {
		return nil
	}
	a := make([]any, 0, elems)
	sub := Reader{buf: buf}
	for sub.Len() > 0 && sub.err == nil {
		v := sub.value(depth, b)
		if sub.err == nil {
			a = append(a, v)
		}
	}
	if sub.err != nil {
		r.err, r.buf = sub.err, nil
		return nil
	}
	return a
}

// fixedValueBytes is the wire size of each fixed-size type code's value.
var fixedValueBytes = [256]int8{'t': 1, 'b': 1, 'B': 1, 's': 2, 'u': 2, 'I': 4, 'i': 4, 'l': 8,
	'f': 4, 'd': 8, 'D': 5, 'T': 8, 'V': 0}

// countValues counts the well-formed values (table fields when keyed) at
// the start of b without decoding them: every value is either of a fixed
// size or length-prefixed, so no nesting is entered.
func countValues(b []byte, keyed bool) int {
	n := 0
	for len(b) > 0 {
		if keyed {
			if k := 1 + int(b[0]); k <= len(b) {
				b = b[k:]
			} else {
				break
			}
		}
		if len(b) == 0 {
			break
		}
		code := b[0]
		b = b[1:]
		size := int(fixedValueBytes[code])
		switch code {
		case 'S', 'x', 'A', 'F':
			if len(b) < 4 {
				return n
			}
			size = 4 + int(min(binary.BigEndian.Uint32(b), math.MaxInt32))
		case 'V':
		default:
			if size == 0 {
				return n // an unknown type code: the decoding fails there
			}
		}
		if size > len(b) {
			break
		}
		b = b[size:]
		n++
	}
	return n
}

// value reads a type code and its value.
func (r *Reader) value(depth int, b *tableBudget) any {
	code := r.Octet()
	if r.err != nil {
		return nil
	}
	switch code {
	case 'S', 'x':
		if len(r.buf) >= 4 && !r.charge(b, costSliceBytes+int(min(binary.BigEndian.Uint32(r.buf), math.MaxInt32))) {
			return nil
		}
	case 'A', 'F', 'V':
	default:
		if !r.charge(b, costBoxBytes) {
			return nil
		}
	}
	switch code {
	case 't':
		return r.Octet() != 0
	case 'b':
		return int8(r.Octet())
	case 'B':
		return r.Octet()
	case 's':
		return int16(r.Short())
	case 'u':
		return r.Short()
	case 'I':
		return int32(r.Long())
	case 'i':
		return r.Long()
	case 'l':
		return int64(r.LongLong())
	case 'f':
		return math.Float32frombits(r.Long())
	case 'd':
		return math.Float64frombits(r.LongLong())
	case 'D':
		return Decimal{Scale: r.Octet(), Value: int32(r.Long())}
	case 'S':
		return r.LongStr()
	case 'x':
		return Binary(r.LongStr())
	case 'A':
		return r.array(depth+1, b)
	case 'T':
		return Timestamp(r.LongLong())
	case 'F':
		return r.table(depth+1, b)
	case 'V':
		return nil
	}
	if r.err == nil {
		r.err = fmt.Errorf("%w: field table type code %q", ErrMalformed, code)
	}
	r.buf = nil
	return nil
}

// Table appends a field table, keys in sorted order (deterministic
// output). A value of a type the list does not name is written as a
// long string of its fmt.Sprint text, and string values as long strings.
func (w *Writer) Table(t Table) {
	at := len(w.Buf)
	w.Long(0)
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w.ShortStr(k)
		w.value(t[k])
	}
	putLen(w.Buf[at:], len(w.Buf)-at-4)
}

func putLen(b []byte, n int) {
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
}

func (w *Writer) value(v any) {
	switch v := v.(type) {
	case bool:
		w.Octet('t')
		if v {
			w.Octet(1)
		} else {
			w.Octet(0)
		}
	case int8:
		w.Octet('b')
		w.Octet(uint8(v))
	case uint8:
		w.Octet('B')
		w.Octet(v)
	case int16:
		w.Octet('s')
		w.Short(uint16(v))
	case uint16:
		w.Octet('u')
		w.Short(v)
	case int32:
		w.Octet('I')
		w.Long(uint32(v))
	case int:
		w.Octet('l')
		w.LongLong(uint64(v))
	case uint32:
		w.Octet('i')
		w.Long(v)
	case int64:
		w.Octet('l')
		w.LongLong(uint64(v))
	case float32:
		w.Octet('f')
		w.Long(math.Float32bits(v))
	case float64:
		w.Octet('d')
		w.LongLong(math.Float64bits(v))
	case Decimal:
		w.Octet('D')
		w.Octet(v.Scale)
		w.Long(uint32(v.Value))
	case []byte:
		w.Octet('S')
		w.LongStr(v)
	case string:
		w.Octet('S')
		w.LongStr([]byte(v))
	case Binary:
		w.Octet('x')
		w.LongStr(v)
	case []any:
		w.Octet('A')
		at := len(w.Buf)
		w.Long(0)
		for _, e := range v {
			w.value(e)
		}
		putLen(w.Buf[at:], len(w.Buf)-at-4)
	case Timestamp:
		w.Octet('T')
		w.LongLong(uint64(v))
	case Table:
		w.Octet('F')
		w.Table(v)
	case nil:
		w.Octet('V')
	default:
		w.Octet('S')
		w.LongStr([]byte(fmt.Sprint(v)))
	}
}
