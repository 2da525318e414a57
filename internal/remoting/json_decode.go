package remoting

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// maxJSONDepth bounds nesting in skipped values so hostile input cannot
// exhaust the stack.
const maxJSONDepth = 64

// decodeJSONHeader parses a JSON RemotingCommand header. It accepts what
// the Go client (jsoniter) and Java (fastjson) send: keys in any order,
// unknown keys ignored, language as a name or a LanguageCode number, remark
// missing or null, and extFields values that are numbers or booleans
// (stringified). It is hand-written because every request passes through
// it; the behaviour matches encoding/json on valid input (tested).
//
// The ext fields of a request whose code lister lists (ExtLister) are kept
// as a list (Command.ext) and ExtFields is left nil; other commands get the
// map. lister may be nil. Headers in the shape the clients write are
// decoded by fastJSONHeader, the others by the general walk.
func decodeJSONHeader(data []byte, lister ExtLister) (*Command, error) {
	if c, ok := fastJSONHeader(data, lister); ok {
		return c, nil
	}
	return decodeJSONHeaderWalk(data, lister)
}

// decodeJSONHeaderWalk is decodeJSONHeader by the general object walk,
// for every header fastJSONHeader does not take.
func decodeJSONHeaderWalk(data []byte, lister ExtLister) (*Command, error) {
	if len(data) > precountHeaderBytes {
		if err := precountJSONHeader(data); err != nil {
			return nil, err
		}
	}
	// One copy of the header backs every plain (unescaped) string in the
	// command, instead of one allocation per key and value.
	d := jsonDecoder{data: data, src: string(data)}
	c := &Command{SerializeType: SerializeJSON}
	if err := d.header(c); err != nil {
		return nil, err
	}
	if c.ext != nil && (lister == nil || c.IsResponse() || !lister.ListsExt(c.Code)) {
		c.ExtFields = make(map[string]string, len(c.ext))
		for _, f := range c.ext {
			c.ExtFields[f.key] = f.value
		}
		c.ext = nil
	}
	return c, nil
}

// precountHeaderBytes is the header size above which the keys and ext
// fields are counted before the header is copied, so that a large header
// over a limit costs no copy. Real headers are far smaller (a send's is
// a few hundred bytes, its properties at most 32 KiB).
const precountHeaderBytes = 64 << 10

// precountJSONHeader checks a header's top-level keys and extFields
// against their limits without copying or keeping anything; any other
// problem is left to the decoding that follows.
func precountJSONHeader(data []byte) error {
	d := jsonDecoder{data: data}
	err := d.object(func(key []byte) error {
		if d.keys++; d.keys > maxJSONHeaderKeys {
			return d.limitf("more than %d keys", maxJSONHeaderKeys)
		}
		if string(key) != "extFields" || d.next() != '{' {
			return d.skipValue(0)
		}
		return d.object(func([]byte) error {
			if d.exts++; d.exts > MaxExtFields {
				return d.limitf("more than %d extFields", MaxExtFields)
			}
			return d.skipValue(1)
		})
	})
	if errors.Is(err, ErrHeaderLimit) {
		return err
	}
	return nil
}

type jsonDecoder struct {
	data []byte
	src  string // string(data)
	pos  int
	// Where the last string read by stringBytes started, and whether it
	// was plain (then its bytes are src[strStart:strStart+len]).
	strStart int
	strPlain bool
	// Top-level keys and ext fields seen so far (every extFields object of
	// the header counts), against maxJSONHeaderKeys and MaxExtFields.
	keys, exts int
}

// lastString returns b, the result of the last stringBytes call, as a
// string, sharing src when it was plain. A string with escapes was decoded
// into a buffer of its own (slowString), which nothing else refers to or
// writes again: the string takes it over instead of copying it (the send's
// properties, whose separators the clients escape, are most of its header).
func (d *jsonDecoder) lastString(b []byte) string {
	if d.strPlain {
		return d.src[d.strStart : d.strStart+len(b)]
	}
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func (d *jsonDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: json at offset %d: %s", ErrBadHeader, d.pos, fmt.Sprintf(format, args...))
}

// limitf reports a header over one of the decoding limits.
func (d *jsonDecoder) limitf(format string, args ...any) error {
	return fmt.Errorf("%w: json header at offset %d: %s", ErrHeaderLimit, d.pos, fmt.Sprintf(format, args...))
}

func (d *jsonDecoder) skipWS() {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// next returns the next non-space byte without consuming it (0 at EOF).
func (d *jsonDecoder) next() byte {
	d.skipWS()
	if d.pos >= len(d.data) {
		return 0
	}
	return d.data[d.pos]
}

func (d *jsonDecoder) expect(b byte) error {
	if d.next() != b {
		return d.errorf("expected %q", b)
	}
	d.pos++
	return nil
}

// header parses the top-level object into c. A key given twice takes its
// last value, as encoding/json (and the Java clients' parser) would: a
// well-formed value of the wrong type or range (say "code":70000) fails the
// header only if no later value of the same key replaces it.
func (d *jsonDecoder) header(c *Command) error {
	var bad [numHeaderKeys]error // per known key: its latest value was unusable
	nbad := 0
	err := d.object(func(key []byte) error {
		if d.keys++; d.keys > maxJSONHeaderKeys {
			return d.limitf("more than %d keys", maxJSONHeaderKeys)
		}
		start := d.pos
		err := d.headerField(c, key)
		if err == nil && nbad == 0 {
			return nil // the common case: no per-key state to keep
		}
		k := headerKeyIndex(key)
		if k < 0 || errors.Is(err, ErrHeaderLimit) {
			return err
		}
		if err == nil {
			if bad[k] != nil {
				bad[k] = nil
				nbad--
			}
			return nil
		}
		d.pos = start
		if d.skipValue(0) != nil {
			return err // not JSON at all
		}
		if bad[k] == nil {
			nbad++
		}
		bad[k] = err
		return nil
	})
	if err != nil {
		return err
	}
	if d.skipWS(); d.pos != len(d.data) {
		return d.errorf("trailing data")
	}
	if nbad > 0 {
		for _, err := range bad {
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// The header keys headerField decodes, for header's per-key state.
const numHeaderKeys = 7

func headerKeyIndex(key []byte) int {
	switch string(key) {
	case "code":
		return 0
	case "version":
		return 1
	case "opaque":
		return 2
	case "flag":
		return 3
	case "language":
		return 4
	case "remark":
		return 5
	case "extFields":
		return 6
	}
	return -1
}

// object parses {"k":v,...}, calling field with each key positioned at
// its value; field must consume the value.
func (d *jsonDecoder) object(field func(key []byte) error) error {
	if err := d.expect('{'); err != nil {
		return err
	}
	if d.next() == '}' {
		d.pos++
		return nil
	}
	for {
		if d.next() != '"' {
			return d.errorf("expected object key")
		}
		key, err := d.stringBytes()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		d.skipWS()
		if err := field(key); err != nil {
			return err
		}
		switch d.next() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return nil
		default:
			return d.errorf("expected ',' or '}'")
		}
	}
}

func (d *jsonDecoder) headerField(c *Command, key []byte) error {
	var err error
	switch string(key) {
	case "code":
		var v int64
		v, err = d.integer(16)
		c.Code = int16(v)
	case "version":
		var v int64
		v, err = d.integer(16)
		c.Version = int16(v)
	case "opaque":
		var v int64
		v, err = d.integer(32)
		c.Opaque = int32(v)
	case "flag":
		var v int64
		v, err = d.integer(32)
		c.Flag = int32(v)
	case "language":
		c.Language, err = d.language()
	case "remark":
		c.Remark, _, err = d.looseString(0)
	case "extFields":
		c.ExtFields, c.ext, err = d.extFields()
	default:
		err = d.skipValue(0)
	}
	return err
}

// integer reads a JSON integer that fits in bits; null reads as 0.
func (d *jsonDecoder) integer(bits int) (int64, error) {
	if d.literal("null") {
		return 0, nil
	}
	tok, err := d.number()
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(tok), 10, bits)
	if err != nil {
		return 0, d.errorf("number %s is not an int%d", tok, bits)
	}
	return v, nil
}

// language reads a language name or a LanguageCode number.
func (d *jsonDecoder) language() (string, error) {
	switch b := d.next(); {
	case b == '"':
		s, err := d.stringBytes()
		return d.lastString(s), err
	case b == '-' || (b >= '0' && b <= '9'):
		tok, err := d.number()
		if err != nil {
			return "", err
		}
		v, err := strconv.ParseUint(string(tok), 10, 8)
		if err != nil {
			return languageOther, nil
		}
		return languageName(byte(v)), nil
	case d.literal("null"):
		return "", nil
	}
	return "", d.errorf("language must be a string or number")
}

// extFields reads the extFields object; null leaves both results nil.
// Up to maxStackExtFields fields are collected on the stack and returned
// as a list of exactly the fields that remain (each key once, a later value
// or null overriding an earlier one), which the caller keeps or turns into a
// map of the right size; more fields are put in a map as they come.
func (d *jsonDecoder) extFields() (map[string]string, []extPair, error) {
	if d.literal("null") {
		return nil, nil, nil
	}
	var stack [maxStackExtFields]extField
	fields := stack[:0]
	var m map[string]string // only when there are more fields than stack holds
	err := d.object(func(key []byte) error {
		if d.exts++; d.exts > MaxExtFields {
			return d.limitf("more than %d extFields", MaxExtFields)
		}
		k := d.lastString(key)
		v, ok, err := d.looseString(1)
		if err != nil {
			return err
		}
		f := extField{k, v, ok}
		if m == nil && len(fields) < cap(fields) {
			fields = append(fields, f) // never grows: stays on the stack
			return nil
		}
		if m == nil {
			m = make(map[string]string, 2*len(fields))
			setExtFields(m, fields)
		}
		setExtFields(m, []extField{f})
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if m != nil {
		return m, nil, nil
	}
	return nil, resolveExtFields(fields), nil
}

// resolveExtFields applies fields in order to an empty list, as
// setExtFields does to a map.
func resolveExtFields(fields []extField) []extPair {
	out := make([]extPair, 0, len(fields))
	var seen uint64 // a bit per key class (keyClass) met so far
	for _, f := range fields {
		i := len(out) // not met before, unless its class was
		if bit := uint64(1) << keyClass(f.key); seen&bit != 0 {
			// Perhaps a key met before (keys are rarely repeated, and
			// different keys rarely share a class): look it up.
			i = 0
			for i < len(out) && out[i].key != f.key {
				i++
			}
		} else {
			seen |= bit
		}
		switch {
		case i < len(out) && f.ok:
			out[i].value = f.value
		case f.ok:
			out = append(out, extPair{f.key, f.value})
		case i < len(out):
			out = append(out[:i], out[i+1:]...)
		}
	}
	return out
}

// keyClass puts a key in one of 64 classes by its length and its last
// byte: two equal keys share their class.
func keyClass(k string) uint {
	if k == "" {
		return 0
	}
	return (uint(len(k))*7 + uint(k[len(k)-1])) & 63
}

// maxStackExtFields is how many ext fields extFields collects before it
// makes the map; requests rarely have more than 16.
const maxStackExtFields = 32

// extField is one decoded ext field; ok is false for a null value.
type extField struct {
	key, value string
	ok         bool
}

// setExtFields applies fields to m in order: a value sets its key, a null
// removes it (a later null overrides an earlier value).
func setExtFields(m map[string]string, fields []extField) {
	for _, f := range fields {
		if f.ok {
			m[f.key] = f.value
		} else {
			delete(m, f.key)
		}
	}
}

// looseString reads a string value, tolerating other types: null reports
// ok=false, numbers and booleans yield their literal text, objects and
// arrays their raw text.
func (d *jsonDecoder) looseString(depth int) (string, bool, error) {
	switch d.next() {
	case '"':
		s, err := d.stringBytes()
		return d.lastString(s), err == nil, err
	case 'n':
		if d.literal("null") {
			return "", false, nil
		}
	}
	start := d.pos
	if err := d.skipValue(depth); err != nil {
		return "", false, err
	}
	return d.src[start:d.pos], true, nil
}

// literal consumes word if it is next.
func (d *jsonDecoder) literal(word string) bool {
	d.skipWS()
	if len(d.data)-d.pos >= len(word) && string(d.data[d.pos:d.pos+len(word)]) == word {
		d.pos += len(word)
		return true
	}
	return false
}

// skipValue consumes one JSON value of any type.
func (d *jsonDecoder) skipValue(depth int) error {
	if depth > maxJSONDepth {
		return d.errorf("nesting deeper than %d", maxJSONDepth)
	}
	switch b := d.next(); {
	case b == '"':
		_, err := d.stringBytes()
		return err
	case b == '{':
		return d.object(func([]byte) error { return d.skipValue(depth + 1) })
	case b == '[':
		return d.array(depth + 1)
	case b == '-' || (b >= '0' && b <= '9'):
		_, err := d.number()
		return err
	case d.literal("true"), d.literal("false"), d.literal("null"):
		return nil
	}
	return d.errorf("unexpected character")
}

func (d *jsonDecoder) array(depth int) error {
	d.pos++ // '['
	if d.next() == ']' {
		d.pos++
		return nil
	}
	for {
		if err := d.skipValue(depth); err != nil {
			return err
		}
		switch d.next() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return nil
		default:
			return d.errorf("expected ',' or ']'")
		}
	}
}

// number consumes a JSON number and returns its text.
func (d *jsonDecoder) number() ([]byte, error) {
	d.skipWS()
	start := d.pos
	if d.pos < len(d.data) && d.data[d.pos] == '-' {
		d.pos++
	}
	switch {
	case d.pos < len(d.data) && d.data[d.pos] == '0':
		d.pos++
	case d.digits() == 0:
		return nil, d.errorf("bad number")
	}
	if d.pos < len(d.data) && d.data[d.pos] == '.' {
		d.pos++
		if d.digits() == 0 {
			return nil, d.errorf("bad number fraction")
		}
	}
	if d.pos < len(d.data) && (d.data[d.pos] == 'e' || d.data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.data) && (d.data[d.pos] == '+' || d.data[d.pos] == '-') {
			d.pos++
		}
		if d.digits() == 0 {
			return nil, d.errorf("bad number exponent")
		}
	}
	return d.data[start:d.pos], nil
}

func (d *jsonDecoder) digits() int {
	n := 0
	for d.pos < len(d.data) && d.data[d.pos] >= '0' && d.data[d.pos] <= '9' {
		d.pos++
		n++
	}
	return n
}

// stringBytes consumes a string literal and returns its decoded bytes. For
// plain strings (no escapes, valid UTF-8) the result aliases the input.
func (d *jsonDecoder) stringBytes() ([]byte, error) {
	d.pos++ // opening quote
	start := d.pos
	// Most strings are printable ASCII up to the next quote: find the quote
	// at once and check the bytes before it in a tight loop.
	if q := bytes.IndexByte(d.data[start:], '"'); q >= 0 && plainASCII(d.data[start:start+q]) {
		d.pos = start + q + 1
		d.strStart, d.strPlain = start, true
		return d.data[start : start+q], nil
	}
	for d.pos < len(d.data) {
		b := d.data[d.pos]
		switch {
		case b == '"':
			s := d.data[start:d.pos]
			d.pos++
			d.strStart, d.strPlain = start, true
			return s, nil
		case b == '\\' || b < 0x20:
			return d.slowString(start)
		case b < utf8.RuneSelf:
			d.pos++
		default:
			r, size := utf8.DecodeRune(d.data[d.pos:])
			if r == utf8.RuneError && size == 1 {
				return d.slowString(start)
			}
			d.pos += size
		}
	}
	return nil, d.errorf("unterminated string")
}

// plainASCII reports whether b holds only printable ASCII other than a
// backslash: a string body that decodes to itself.
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// plainByte reports whether c, inside a string, decodes to itself: it is
// printable ASCII and neither a quote nor a backslash.
func plainByte(c byte) bool { return c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf }

// slowString decodes a string with escapes or invalid UTF-8 (replaced by
// U+FFFD, as encoding/json does), starting again at start, into a new
// buffer that the caller owns (lastString makes it a string in place).
func (d *jsonDecoder) slowString(start int) ([]byte, error) {
	d.strPlain = false
	out := make([]byte, 0, d.rawStringEnd()-start)
	out = append(out, d.data[start:d.pos]...)
	for d.pos < len(d.data) {
		// Copy the run of bytes that decode to themselves at once (a
		// send's properties are mostly such runs between escaped
		// separators).
		run := d.pos
		for run < len(d.data) && plainByte(d.data[run]) {
			run++
		}
		out = append(out, d.data[d.pos:run]...)
		if d.pos = run; run == len(d.data) {
			break
		}
		b := d.data[d.pos]
		switch {
		case b == '"':
			d.pos++
			return out, nil
		case b < 0x20:
			return nil, d.errorf("control character in string")
		case b == '\\':
			var err error
			if out, err = d.escape(out); err != nil {
				return nil, err
			}
		default:
			r, size := utf8.DecodeRune(d.data[d.pos:])
			out = utf8.AppendRune(out, r) // RuneError for invalid bytes
			d.pos += size
		}
	}
	return nil, d.errorf("unterminated string")
}

// rawStringEnd returns the position of the quote closing the string that
// d.pos is inside of (or len(d.data)): the decoded string is rarely longer
// than its escaped form, so it sizes the output buffer.
func (d *jsonDecoder) rawStringEnd() int {
	i := d.pos
	for i < len(d.data) && d.data[i] != '"' {
		if d.data[i] == '\\' {
			i++
		}
		i++
	}
	return min(i, len(d.data))
}

// escape decodes one backslash escape at d.pos.
func (d *jsonDecoder) escape(out []byte) ([]byte, error) {
	if d.pos+1 >= len(d.data) {
		return nil, d.errorf("unterminated escape")
	}
	c := d.data[d.pos+1]
	d.pos += 2
	switch c {
	case '"', '\\', '/':
		return append(out, c), nil
	case 'b':
		return append(out, '\b'), nil
	case 'f':
		return append(out, '\f'), nil
	case 'n':
		return append(out, '\n'), nil
	case 'r':
		return append(out, '\r'), nil
	case 't':
		return append(out, '\t'), nil
	case 'u':
		r, ok := d.hex4()
		if !ok {
			return nil, d.errorf("bad \\u escape")
		}
		if utf16.IsSurrogate(r) {
			r = d.lowSurrogate(r)
		}
		return utf8.AppendRune(out, r), nil
	}
	return nil, d.errorf("bad escape \\%c", c)
}

// lowSurrogate completes a surrogate pair if a \uDC00-\uDFFF escape
// follows; a lone surrogate becomes U+FFFD.
func (d *jsonDecoder) lowSurrogate(hi rune) rune {
	if d.pos+1 < len(d.data) && d.data[d.pos] == '\\' && d.data[d.pos+1] == 'u' {
		save := d.pos
		d.pos += 2
		if lo, ok := d.hex4(); ok {
			if r := utf16.DecodeRune(hi, lo); r != utf8.RuneError {
				return r
			}
		}
		d.pos = save
	}
	return utf8.RuneError
}

func (d *jsonDecoder) hex4() (rune, bool) {
	if d.pos+4 > len(d.data) {
		return 0, false
	}
	var r rune
	for _, b := range d.data[d.pos : d.pos+4] {
		switch {
		case b >= '0' && b <= '9':
			b -= '0'
		case b >= 'a' && b <= 'f':
			b = b - 'a' + 10
		case b >= 'A' && b <= 'F':
			b = b - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(b)
	}
	d.pos += 4
	return r, true
}
