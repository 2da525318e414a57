package config

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxFileBytes is the largest properties file Load accepts. Real broker.conf
// files are a few KiB; anything near this size is a mistake.
const MaxFileBytes = 1 << 20

// ErrSyntax is wrapped by every properties syntax error.
var ErrSyntax = errors.New("config: properties syntax error")

// Property is one key/value pair of a properties file, after escapes are
// decoded. Line is the 1-based line on which its logical line starts.
type Property struct {
	Key   string
	Value string
	Line  int
}

// ParseProperties parses Java .properties text (the format of broker.conf).
//
// Differences from java.util.Properties, all on the side of strictness: the
// input must be UTF-8 (Java's load(InputStream) reads ISO-8859-1; broker.conf
// files are ASCII in practice), an empty key or a malformed \uXXXX escape or
// a lone UTF-16 surrogate is an error, and unescaped trailing whitespace of a
// value is trimmed (Java keeps it, and a stray space after "SYNC_FLUSH" is a
// classic broker.conf bug). Duplicate keys are returned as they appear; the
// caller decides what they mean.
func ParseProperties(data []byte) ([]Property, error) {
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%w: file is larger than %d bytes", ErrSyntax, MaxFileBytes)
	}
	data = skipBOM(data)
	var props []Property
	p := lineReader{data: data, line: 1}
	for {
		logical, line, ok := p.next()
		if !ok {
			return props, nil
		}
		if !utf8.Valid(logical) {
			return nil, fmt.Errorf("%w: line %d: not valid UTF-8", ErrSyntax, line)
		}
		prop, err := splitKeyValue(logical)
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %v", ErrSyntax, line, err)
		}
		prop.Line = line
		props = append(props, prop)
	}
}

func skipBOM(b []byte) []byte {
	if len(b) >= 3 && b[0] == 0xEF && b[1] == 0xBB && b[2] == 0xBF {
		return b[3:]
	}
	return b
}

// isSpace reports the whitespace of the properties format.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\f' }

// lineReader yields logical lines: natural lines joined across backslash
// continuations, with comments and blank lines skipped.
type lineReader struct {
	data []byte
	pos  int
	line int // line number of the next natural line
	buf  []byte
}

// natural returns the next natural line without its terminator (\n, \r\n or
// \r) and its 1-based line number.
func (r *lineReader) natural() ([]byte, int, bool) {
	if r.pos >= len(r.data) {
		return nil, 0, false
	}
	start, n := r.pos, r.line
	i := start
	for i < len(r.data) && r.data[i] != '\n' && r.data[i] != '\r' {
		i++
	}
	r.pos = i
	if i < len(r.data) {
		if r.data[i] == '\r' && i+1 < len(r.data) && r.data[i+1] == '\n' {
			r.pos++
		}
		r.pos++
	}
	r.line++
	return r.data[start:i], n, true
}

// next returns the next logical line, its leading whitespace removed.
func (r *lineReader) next() ([]byte, int, bool) {
	for {
		nl, n, ok := r.natural()
		if !ok {
			return nil, 0, false
		}
		nl = trimLeft(nl)
		if len(nl) == 0 || nl[0] == '#' || nl[0] == '!' {
			continue
		}
		r.buf = r.buf[:0]
		for continues(nl) {
			r.buf = append(r.buf, nl[:len(nl)-1]...)
			nl, _, ok = r.natural()
			if !ok {
				return r.buf, n, true
			}
			nl = trimLeft(nl)
		}
		r.buf = append(r.buf, nl...)
		return r.buf, n, true
	}
}

func trimLeft(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	return b
}

// continues reports whether a natural line ends in an odd number of
// backslashes, i.e. with a line continuation.
func continues(b []byte) bool {
	n := 0
	for i := len(b) - 1; i >= 0 && b[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// splitKeyValue splits a logical line into its decoded key and value. The
// key ends at the first unescaped '=', ':' or whitespace; whitespace and at
// most one '=' or ':' separate it from the value.
func splitKeyValue(l []byte) (Property, error) {
	keyEnd := len(l)
	for i := 0; i < len(l); i++ {
		c := l[i]
		if c == '\\' {
			i++
			continue
		}
		if c == '=' || c == ':' || isSpace(c) {
			keyEnd = i
			break
		}
	}
	valStart := keyEnd
	sep := false
	for valStart < len(l) {
		c := l[valStart]
		if !isSpace(c) {
			if sep || (c != '=' && c != ':') {
				break
			}
			sep = true
		}
		valStart++
	}
	key, err := unescape(l[:keyEnd])
	if err != nil {
		return Property{}, fmt.Errorf("key: %v", err)
	}
	if key == "" {
		return Property{}, errors.New("empty key")
	}
	val, err := unescape(l[valStart:])
	if err != nil {
		return Property{}, fmt.Errorf("key %q: %v", key, err)
	}
	return Property{Key: key, Value: val}, nil
}

// unescape decodes the escapes of the properties format (\t \n \r \f
// \uXXXX, and \c for any other c) and drops unescaped trailing whitespace.
func unescape(s []byte) (string, error) {
	var out strings.Builder
	keep := 0 // length of out up to the last escaped or non-space character
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			out.WriteByte(c)
			if !isSpace(c) {
				keep = out.Len()
			}
			continue
		}
		i++
		if i == len(s) {
			break // a lone backslash at the very end is dropped, as in Java
		}
		switch c = s[i]; c {
		case 't':
			out.WriteByte('\t')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 'f':
			out.WriteByte('\f')
		case 'u':
			r, n, err := decodeU(s[i+1:])
			if err != nil {
				return "", err
			}
			i += n
			out.WriteRune(r)
		default:
			out.WriteByte(c)
		}
		keep = out.Len()
	}
	return out.String()[:keep], nil
}

// decodeU decodes the hex digits after "\u" (s starts at the first digit),
// joining a UTF-16 surrogate pair written as two escapes. It returns the rune
// and the number of bytes of s consumed.
func decodeU(s []byte) (rune, int, error) {
	r1, ok := hex4(s)
	if !ok {
		return 0, 0, errors.New(`malformed \uXXXX escape`)
	}
	if !utf16.IsSurrogate(r1) {
		return r1, 4, nil
	}
	if len(s) >= 10 && s[4] == '\\' && s[5] == 'u' {
		if r2, ok := hex4(s[6:]); ok {
			if r := utf16.DecodeRune(r1, r2); r != utf8.RuneError {
				return r, 10, nil
			}
		}
	}
	return 0, 0, fmt.Errorf(`\u%04X is a lone UTF-16 surrogate`, r1)
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}
