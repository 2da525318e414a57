package wire

import (
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

// Table reads a field table.
func (r *Reader) Table() Table { return r.table(0) }

func (r *Reader) table(depth int) Table {
	n := r.Long()
	if r.err != nil {
		return nil
	}
	if depth >= MaxTableDepth {
		r.fail(fmt.Sprintf("table nested deeper than %d", MaxTableDepth), math.MaxInt32)
		return nil
	}
	b := r.take(int(min(n, math.MaxInt32)), "table")
	if r.err != nil {
		return nil
	}
	t := Table{}
	sub := Reader{buf: b}
	for sub.Len() > 0 && sub.err == nil {
		k := sub.ShortStr()
		v := sub.value(depth)
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

func (r *Reader) array(depth int) []any {
	n := r.Long()
	if depth >= MaxTableDepth {
		r.fail(fmt.Sprintf("array nested deeper than %d", MaxTableDepth), math.MaxInt32)
	}
	b := r.take(int(min(n, math.MaxInt32)), "array")
	if r.err != nil {
		return nil
	}
	a := []any{}
	sub := Reader{buf: b}
	for sub.Len() > 0 && sub.err == nil {
		v := sub.value(depth)
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

// value reads a type code and its value.
func (r *Reader) value(depth int) any {
	code := r.Octet()
	if r.err != nil {
		return nil
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
		return r.array(depth + 1)
	case 'T':
		return Timestamp(r.LongLong())
	case 'F':
		return r.table(depth + 1)
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
