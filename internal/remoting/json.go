package remoting

import (
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// appendJSONHeader appends the JSON header of c in the Go client's key
// order: {"code":..,"language":..,"version":..,"opaque":..,"flag":..,
// "remark":..,"extFields":{..}}. extFields keys are sorted so the output is
// deterministic; every ext value is a JSON string.
func appendJSONHeader(dst []byte, c *Command) []byte {
	dst = append(dst, `{"code":`...)
	dst = strconv.AppendInt(dst, int64(c.Code), 10)
	dst = append(dst, `,"language":`...)
	lang := c.Language
	if lang == "" {
		lang = LanguageJava
	}
	dst = appendJSONString(dst, lang)
	dst = append(dst, `,"version":`...)
	dst = strconv.AppendInt(dst, int64(c.Version), 10)
	dst = append(dst, `,"opaque":`...)
	dst = strconv.AppendInt(dst, int64(c.Opaque), 10)
	dst = append(dst, `,"flag":`...)
	dst = strconv.AppendInt(dst, int64(c.Flag), 10)
	dst = append(dst, `,"remark":`...)
	dst = appendJSONString(dst, c.Remark)
	dst = append(dst, `,"extFields":{`...)
	var stack [maxStackExtFields]extPair
	for i, f := range sortedFields(stack[:0], c) {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, f.key)
		dst = append(dst, ':')
		dst = appendJSONString(dst, f.value)
	}
	return append(dst, "}}"...)
}

// sortedFields appends the ext fields of c to dst sorted by key. Keys and
// values are taken in one pass over the map (or list), so encoding looks
// nothing up.
func sortedFields(dst []extPair, c *Command) []extPair {
	for k, v := range c.ExtFields {
		dst = append(dst, extPair{k, v})
	}
	dst = append(dst, c.ext...)
	if len(dst) > insertionSortMax {
		slices.SortFunc(dst, func(a, b extPair) int { return strings.Compare(a.key, b.key) })
		return dst
	}
	// Headers have a dozen fields or so: an insertion sort beats the
	// general sort at this size.
	for i := 1; i < len(dst); i++ {
		f, j := dst[i], i
		for ; j > 0 && f.key < dst[j-1].key; j-- {
			dst[j] = dst[j-1]
		}
		dst[j] = f
	}
	return dst
}

// extPair is one ext field being encoded.
type extPair struct{ key, value string }

// insertionSortMax is the largest field count sortedFields sorts by
// insertion.
const insertionSortMax = 24

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string literal. Quotes, backslashes
// and control characters are escaped (the message properties separators
// \x01 and \x02 become \u0001 and \u0002); invalid UTF-8 bytes become
// U+FFFD so the output is always valid JSON.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	// Most strings (every key and value of a send's response) are bytes
	// that stand for themselves: find where the first other byte is with
	// one table lookup per byte, and copy what comes before it at once.
	i := 0
	for i < len(s) && fastPlain[s[i]] {
		i++
	}
	if i == len(s) {
		dst = append(dst, s...)
		return append(dst, '"')
	}
	start := 0
	for i < len(s) {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendEscapedByte(dst, b)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

func appendEscapedByte(dst []byte, b byte) []byte {
	switch b {
	case '"', '\\':
		return append(dst, '\\', b)
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
}
